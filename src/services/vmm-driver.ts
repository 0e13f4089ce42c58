/**
 * Which VMM driver this daemon runs, and its daemon-wide settings: the one importer of a
 * driver's entry module (index.ts of drivers/qemu). `buildServices` and `forkd run` without a
 * daemon call `wireVmm()`; a second driver would be chosen here.
 */
import { qemu } from '../drivers/qemu/index.js';
import { useVmm } from './vmm.js';

export {
  configureConfinement,
  configureTuning,
  parseMerge,
  parseTbMiB,
  protectHome,
  vmTuning,
  type VmTuning,
} from '../drivers/qemu/index.js';

/** Give the services their VMM (idempotent). */
export function wireVmm(): void {
  useVmm(qemu);
}
