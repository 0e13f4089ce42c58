/**
 * The boot snapshot a verb that makes an image captures right after it (`image build`,
 * `unpack`; `image pull`/`import`/`from-image` have the daemon do it in the pull):
 * through the daemon when one runs (the size and NIC its starts use), else in this process
 * (what `forkd run` without a daemon restores). Progress on stderr; a failure is a warning
 * and the verb still succeeds (docs/images.md).
 */
import type { Command } from 'commander';
import type { Forkd, ImageInfo } from '@forkd/sdk';
import type { Paths } from '../config.js';

export interface BootSnapshotFlags {
  /** `--no-boot-snapshot` sets it false. */
  bootSnapshot?: boolean;
  json?: boolean;
}

/** `--no-boot-snapshot` on a verb that makes an image. */
export function bootSnapshotFlag(cmd: Command): Command {
  return cmd.option(
    '--no-boot-snapshot',
    "do not capture the image's boot snapshot now (its first start captures it)",
  );
}

/** Progress lines on stderr, none with `--json`. */
function sayer(flags: BootSnapshotFlags): (line: string) => void {
  return flags.json ? () => undefined : (line) => process.stderr.write(`  ${line}\n`);
}

/**
 * Capture the boot snapshot of `image` unless `--no-boot-snapshot`; the warnings (empty
 * when it is there). `daemon` when one runs; else `p`, this process's home.
 */
export async function captureAfter(
  image: string,
  flags: BootSnapshotFlags,
  where: { daemon: Forkd } | { paths: Paths },
): Promise<string[]> {
  if (flags.bootSnapshot === false) return [];
  const [{ eagerBootSnapshot, describeSize, ready }, say] = [
    await import('../services/snapshots/boot-eager.js'),
    sayer(flags),
  ];
  if ('daemon' in where) {
    return eagerBootSnapshot(
      image,
      async (onProgress) => {
        const info = await where.daemon.images.captureBootSnapshot(image, {
          onProgress: (e) => onProgress(e.message),
        });
        const b = newest(info);
        const size = { memory_mib: b.memoryMib, cpus: b.cpus, network: b.network };
        return { tag: b.tag, detail: describeSize(size) };
      },
      say,
    );
  }
  const { captureBootSnapshotHere } = await import('../services/snapshots/boot-restore.js');
  const { wireVmm } = await import('../services/vmm-driver.js');
  wireVmm();
  return eagerBootSnapshot(
    image,
    async (onProgress) => ready(await captureBootSnapshotHere(where.paths, image, onProgress)),
    say,
  );
}

/** The boot snapshot a capture through the daemon made: a current one of the default size. */
function newest(info: ImageInfo) {
  const current = (info.bootSnapshots ?? []).filter((b) => b.current);
  const b = current.find((x) => x.memoryMib === 256 && x.cpus === 1) ?? current[0];
  if (!b) throw new Error(`the daemon answered no current boot snapshot of image ${info.name}`);
  return b;
}
