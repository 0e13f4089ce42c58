/**
 * `forkd images`: the images, as a table or `--json`: the daemon's when one runs, else
 * those under FORKD_HOME (only then is the image service loaded).
 */
import type { Command } from 'commander';
import type { ImageT } from '../contract/schemas.js';
import type { Image, ImageSource } from '../services/local.js';
import { daemonImages } from './client.js';
import { action, formatBytes, printJson, printTable } from './output.js';

export function register(cmd: Command): void {
  cmd.option('--json', 'machine-readable output').action(action(showImages));
}

/** The images under this host's FORKD_HOME, read without a daemon. */
async function localImages(): Promise<ImageT[]> {
  const [{ paths }, { ImageManager }] = await Promise.all([
    import('../config.js'),
    import('../services/local.js'),
  ]);
  return new ImageManager(paths()).list();
}

/** The listing shared by `forkd images` and `forkd image ls`. */
export async function showImages(opts: { json?: boolean }): Promise<void> {
  const images = ((await daemonImages()) as ImageT[] | undefined) ?? (await localImages());
  if (opts.json) return printJson(images);
  if (images.length === 0) {
    process.stderr.write(
      'no images: build one with `forkd image build --busybox --name busybox`\n',
    );
    return;
  }
  printTable(
    ['NAME', 'SIZE', 'DISK', 'CREATED', 'SOURCE', 'BOOT SNAPSHOTS'],
    images.map((i) => [
      i.name,
      formatBytes(i.size_bytes),
      formatBytes(i.disk_bytes),
      i.created_at.slice(0, 16).replace('T', ' '),
      describeSource(i.source as ImageSource),
      describeBoots(i.boot_snapshots ?? []),
    ]),
  );
}

/** An image's boot snapshots in a table cell: size, vCPUs, NIC, bytes on disk each. */
function describeBoots(boots: NonNullable<ImageT['boot_snapshots']>): string {
  const shown = boots.map(
    (b) =>
      `${b.memory_mib}M/${b.cpus}cpu/${b.network} ${formatBytes(b.physical_bytes)}` +
      (b.current ? '' : ' (outdated)'),
  );
  return shown.join(', ') || '-';
}

/** One line a person reads after a build. */
export function describeImage(i: Image): string {
  return (
    `image ${i.name}: ${formatBytes(i.size_bytes)} ext4 (${formatBytes(i.disk_bytes)} on disk), ` +
    `from ${describeSource(i.source)}`
  );
}

function describeSource(s: ImageSource): string {
  switch (s.kind) {
    case 'dir':
      return `dir ${s.dir}`;
    case 'busybox':
      return `busybox ${s.version}`;
    case 'debian':
      return ['debian', s.suite, ...(s.packages.length ? [`+${s.packages.join(',')}`] : [])].join(
        ' ',
      );
    case 'oci':
      return `${s.reference}@${s.digest.slice(0, 19)}`;
    case 'archive':
      return `${s.format} ${s.file}`;
  }
}
