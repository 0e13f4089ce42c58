/**
 * `forkd images`: the images, as a table or `--json`: the daemon's when one runs, else
 * those under FORKD_HOME.
 */
import type { Command } from 'commander';
import { paths } from '../config.js';
import { listImages, type Image, type ImageSource } from '../services/images/index.js';
import { daemonImages } from './client.js';
import { action, printJson, printTable } from './output.js';

export function register(program: Command): void {
  program
    .command('images')
    .description('list images (same as `forkd image ls`)')
    .option('--json', 'machine-readable output')
    .action(action(showImages));
}

/** The listing shared by `forkd images` and `forkd image ls`. */
export async function showImages(opts: { json?: boolean }): Promise<void> {
  const images = ((await daemonImages()) as Image[] | undefined) ?? (await listImages(paths()));
  if (opts.json) return printJson(images);
  if (images.length === 0) {
    process.stderr.write(
      'no images: build one with `forkd image build --busybox --name busybox`\n',
    );
    return;
  }
  printTable(
    ['NAME', 'SIZE', 'DISK', 'CREATED', 'SOURCE'],
    images.map((i) => [
      i.name,
      formatBytes(i.size_bytes),
      formatBytes(i.disk_bytes),
      i.created_at.slice(0, 16).replace('T', ' '),
      describeSource(i.source),
    ]),
  );
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
  }
}

/** Binary units, one decimal below 10 (images are sized in MiB, so KiB rarely shows). */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n < 10 && i > 0 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}
