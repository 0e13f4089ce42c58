/**
 * The image service the daemon serves: the on-disk image store (src/services/images) is
 * the source of truth, so this only adapts it to the REST shapes and keeps the host path
 * of a rootfs out of answers.
 */
import type { ImageT } from '../contract/schemas.js';
import type { Paths } from '../config.js';
import type { ImageService } from './contracts.js';
import { buildImageFromDir, listImages, removeImage, type Image } from './images.js';

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
