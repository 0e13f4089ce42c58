/**
 * The images service: read-only ext4 root filesystems under FORKD_HOME/images, built from a
 * directory, the host's static busybox, or a Debian suite (DESIGN.md "Disk"). The parts
 * live in src/services/images/; this module is the one import for routes and the CLI.
 */
export {
  validateImageName,
  imageFiles,
  getImage,
  listImages,
  removeImage,
  type Image,
  type ImageFiles,
  type ImageManifest,
  type ImageSource,
} from './images/store.js';
export {
  buildImageFromDir,
  defaultSizeMiB,
  type BuildOptions,
  type Progress,
} from './images/build.js';
export {
  buildBusyboxImage,
  hostBusybox,
  isStaticElf,
  DEFAULT_IMAGE,
  HOST_BUSYBOX,
} from './images/busybox.js';
export { buildDebianImage, type DebianOptions } from './images/debian.js';
export { findAptMirror } from './images/apt-sources.js';
