/**
 * The REST contract, images: config, boot snapshots, build, pull, import, registry logins.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { between, strict } from './build.js';
import { LIMITS } from '../rules.js';
import { ErrorBody, ImageName } from './common.js';
import { NetworkMode } from './sandboxes.js';

/** An OCI image's config as a sandbox's defaults (images pulled or imported). */
export const ImageConfig = Type.Object({
  env: Type.Array(Type.String(), { description: 'KEY=VALUE entries' }),
  working_dir: Type.Optional(Type.String()),
  user: Type.Optional(Type.String()),
  entrypoint: Type.Optional(Type.Array(Type.String())),
  cmd: Type.Optional(Type.Array(Type.String())),
});
/** What a boot snapshot is valid for: every field must equal a start's for it to be used. */
export const BootKey = Type.Object(
  {
    image: Type.String(),
    image_id: Type.String({ description: "the image's content identity" }),
    kernel: Type.String(),
    guest_id: Type.String({ description: 'identity of the kernel, initramfs and agent files' }),
    qemu: Type.String(),
    machine: Type.String(),
    accel: Type.Union([Type.Literal('kvm'), Type.Literal('tcg')]),
    memory_mib: Type.Integer(),
    cpus: Type.Integer(),
    network: NetworkMode,
  },
  { description: 'set on a boot snapshot: what it is valid for' },
);

/** One boot snapshot of an image, as `forkd images` shows it. */
export const BootSnapshotRef = Type.Object({
  tag: Type.String(),
  memory_mib: Type.Integer(),
  cpus: Type.Integer(),
  network: NetworkMode,
  physical_bytes: Type.Integer(),
  current: Type.Boolean({ description: 'whether it matches the image as it is now' }),
});
export type BootSnapshotRefT = Static<typeof BootSnapshotRef>;

export const Image = Type.Object(
  {
    name: ImageName,
    format: Type.String(),
    size_bytes: Type.Integer(),
    disk_bytes: Type.Integer(),
    created_at: Type.String(),
    source: Type.Record(Type.String(), Type.Unknown()),
    config: Type.Optional(ImageConfig),
    cache: Type.Optional(
      Type.Boolean({
        description:
          "a cache entry (a container image's root, made by the containerd shim): removed with its boot snapshots once unused for the daemon's image cache time, or by a prune",
      }),
    ),
    boot_snapshots: Type.Optional(
      Type.Array(BootSnapshotRef, {
        description: 'its boot snapshots (docs/snapshots.md "Boot snapshots")',
      }),
    ),
    warnings: Type.Optional(
      Type.Array(Type.String(), {
        description:
          'what a build, pull or import did not do and did not fail for: a boot snapshot that could not be captured (its first start captures one)',
      }),
    ),
  },
  { $id: 'Image' },
);
export type ImageT = Static<typeof Image>;
/** Whether a build, pull or import captures the image's boot snapshot (default true). */
const BootSnapshotFlag = Type.Boolean({
  description:
    "capture the image's boot snapshot for the default size once it is made (default true); a capture that fails is a warning, not the request's failure",
});
export const ImageList = Type.Object({ images: Type.Array(Image) });
export const CreateImage = Type.Object(
  {
    name: ImageName,
    from_dir: Type.String({
      pattern: '^/[^\\u0000]*$',
      maxLength: 4096,
      description: 'a directory on the daemon host',
    }),
    size_mib: Type.Optional(Type.Integer(between(LIMITS.imageSizeMiB))),
    force: Type.Optional(Type.Boolean()),
    boot_snapshot: Type.Optional(BootSnapshotFlag),
    cache: Type.Optional(
      Type.Boolean({
        description:
          'make the image a cache entry: the daemon removes it once no sandbox or snapshot has used it for its image cache time (`forkd daemon --image-cache-ttl`), and `image prune` once unused (default false)',
      }),
    ),
  },
  strict,
);
export const ImageParams = Type.Object({ name: ImageName }, strict);

const Platform = Type.String({
  pattern: '^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$',
  description: 'os/arch[/variant]; default linux/amd64',
});
/** POST /v1/images/pull: a registry image into an image. */
export const PullImage = Type.Object(
  {
    reference: Type.String({
      minLength: 1,
      maxLength: 1024,
      description: 'REGISTRY/REPOSITORY[:TAG][@DIGEST]',
    }),
    name: Type.Optional(ImageName),
    platform: Type.Optional(Platform),
    size_mib: Type.Optional(Type.Integer(between(LIMITS.imageSizeMiB))),
    force: Type.Optional(
      Type.Boolean({ description: 'rebuild even when the image has this digest already' }),
    ),
    stream: Type.Optional(
      Type.Boolean({ description: 'answer with NDJSON progress events, then the image' }),
    ),
    boot_snapshot: Type.Optional(BootSnapshotFlag),
  },
  strict,
);
export type PullImageT = Static<typeof PullImage>;
/** POST /v1/images/import: an OCI layout or `docker save` archive on the daemon host. */
export const ImportImage = Type.Object(
  {
    path: Type.String({
      pattern: '^/[^\\u0000]*$',
      maxLength: 4096,
      description: 'an OCI layout directory or an image tar on the daemon host',
    }),
    ref: Type.Optional(
      Type.String({ maxLength: 256, description: 'which image of a multi-image archive' }),
    ),
    name: Type.Optional(ImageName),
    platform: Type.Optional(Platform),
    size_mib: Type.Optional(Type.Integer(between(LIMITS.imageSizeMiB))),
    force: Type.Optional(Type.Boolean()),
    stream: Type.Optional(Type.Boolean()),
    boot_snapshot: Type.Optional(BootSnapshotFlag),
  },
  strict,
);
export type ImportImageT = Static<typeof ImportImage>;
/** POST /v1/images/{name}/boot-snapshot: capture the image's boot snapshot of a size now. */
export const CaptureBootSnapshot = Type.Object(
  {
    memory_mib: Type.Optional(Type.Integer(between(LIMITS.memoryMiB))),
    cpus: Type.Optional(Type.Integer(between(LIMITS.cpus))),
    network: Type.Optional(NetworkMode),
    stream: Type.Optional(
      Type.Boolean({ description: 'answer with NDJSON progress events, then the image' }),
    ),
  },
  strict,
);
export type CaptureBootSnapshotT = Static<typeof CaptureBootSnapshot>;
/**
 * Streaming pull/import (application/x-ndjson): {"type":"progress","message",layer?,current?,
 * total?} lines, then {"type":"done","image":Image} or {"type":"error","error"}.
 */
export const ImageEvent = Type.Union(
  [
    Type.Object({
      type: Type.Literal('progress'),
      message: Type.String(),
      layer: Type.Optional(Type.String()),
      current: Type.Optional(Type.Integer()),
      total: Type.Optional(Type.Integer()),
    }),
    Type.Object({ type: Type.Literal('done'), image: Image }),
    Type.Object({ type: Type.Literal('error'), error: ErrorBody.properties.error }),
  ],
  { $id: 'ImageEvent' },
);
export const PruneResult = Type.Object({
  blobs: Type.Integer({ description: 'cached blobs removed' }),
  bytes: Type.Integer({ description: 'bytes freed by the blobs' }),
  images: Type.Array(Type.String(), {
    description: "cache images (containers' roots) removed: no sandbox or snapshot used them",
  }),
});
export type PruneResultT = Static<typeof PruneResult>;
/** POST /v1/logins: registry credentials, checked against the registry, then kept. */
export const Login = Type.Object(
  {
    registry: Type.String({ pattern: '^[A-Za-z0-9.:\\[\\]-]{1,255}$', description: 'host[:port]' }),
    username: Type.String({ minLength: 1, maxLength: 1024 }),
    password: Type.String({ minLength: 1, maxLength: 65536 }),
  },
  strict,
);
export type LoginT = Static<typeof Login>;
export const LoginParams = Type.Object(
  { registry: Type.String({ pattern: '^[A-Za-z0-9.:\\[\\]-]{1,255}$' }) },
  strict,
);
