/**
 * The images service: read-only ext4 root filesystems under FORKD_HOME/images, built from a
 * directory, the host's static busybox, or a Debian suite (DESIGN.md "Disk"). The parts
 * live beside this module; it is the one import for the daemon, the CLI and other
 * services. The on-disk store is the source of truth: the service only adapts it to the
 * REST shapes and keeps the host path of a rootfs out of answers.
 */
import type { ImageT } from '../../contract/schemas.js';
import type { Paths } from '../../config.js';
import type { ImageService } from '../contracts.js';
import { buildImageFromDir } from './build.js';
import { listImages, removeImage, type Image } from './store.js';

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
} from './store.js';
export { buildImageFromDir, defaultSizeMiB, type BuildOptions, type Progress } from './build.js';
export {
  buildBusyboxImage,
  hostBusybox,
  isStaticElf,
  DEFAULT_IMAGE,
  HOST_BUSYBOX,
} from './busybox.js';
export { buildDebianImage, type DebianOptions } from './debian.js';
export { findAptMirror } from './apt-sources.js';

function toWire(image: Image): ImageT {
  const { name, format, size_bytes, disk_bytes, created_at, source } = image;
  return { name, format, size_bytes, disk_bytes, created_at, source: { ...source } };
}

export class ImageStore implements ImageService {
  constructor(private readonly paths: Paths) {}

  async list(): Promise<ImageT[]> {
    return (await listImages(this.paths)).map(toWire);
  }

  async create(req: {
    name: string;
    from_dir: string;
    size_mib?: number;
    force?: boolean;
  }): Promise<ImageT> {
    const image = await buildImageFromDir(this.paths, {
      name: req.name,
      dir: req.from_dir,
      sizeMiB: req.size_mib,
      force: req.force,
    });
    return toWire(image);
  }

  /** Running sandboxes keep working: QEMU holds the rootfs open and reads it past unlink. */
  async remove(name: string): Promise<void> {
    await removeImage(this.paths, name);
  }
}
