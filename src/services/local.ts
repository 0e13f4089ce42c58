/**
 * What the CLI runs on this host itself, without a daemon: `forkd run` in process, `setup`,
 * `doctor`, `image build|rm`, the local `images` listing, the daemon's QEMU and pool flags.
 * The one services module cli/ may import (lint enforces it); every other verb is a client
 * of the SDK.
 */
export { setupGuest } from './guest.js';
export {
  buildBusyboxImage,
  buildDebianImage,
  buildImageFromDir,
  DEFAULT_IMAGE,
  getImage,
  imageEnv,
  imageExecDefaults,
  ImageManager,
  listImages,
  removeImage,
  type BuildOptions,
  type Image,
  type ImageSource,
  type Progress,
} from './images/index.js';
export { runDoctor, type CheckResult } from './doctor.js';
export { parseMerge, parseTbMiB, wireVmm } from './vmm-driver.js';
export {
  bootSandbox,
  destroySandbox,
  resolveResources,
  type Sandbox,
} from './sandboxes/sandbox.js';
export { withExecDefaults } from './sandboxes/exec.js';
export { Limiter, runCgroupParent } from './limits.js';
export { restoreBootSnapshot } from './snapshots/boot-restore.js';
export { POOL_BUDGET_MAX, type PoolBudgetLimits } from './snapshots/pool-budget.js';
