/**
 * The REST contract, the host: health and version.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type from 'typebox';

export const Health = Type.Object({ status: Type.Literal('ok') });
export const Version = Type.Object({
  version: Type.String(),
  api: Type.Literal('v1'),
  qemu: Type.String(),
  accel: Type.Union([Type.Literal('kvm'), Type.Literal('tcg')]),
});
