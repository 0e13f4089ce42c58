/**
 * `forkd image build|rm|ls`: build an image from a directory, the host's busybox or a
 * Debian suite; remove one; list them (pull, import, inspect, prune: image-oci.ts). Build progress goes to stderr, the result to stdout.
 */
import type { Command } from 'commander';
import { imageToWire } from '@forkd/sdk/wire';
import { paths } from '../config.js';
import { ForkdError } from '../errors.js';
import {
  buildBusyboxImage,
  buildDebianImage,
  buildImageFromDir,
  removeImage,
  type BuildOptions,
  type Image,
  type Progress,
} from '../services/local.js';
import { bootSnapshotFlag, captureAfter } from './boot-snapshot.js';
import { findDaemon } from './client.js';
import { describeImage, showImages } from './images.js';
import { register as registerOci } from './image-oci.js';
import { action, printJson } from './output.js';
import { parseName, parseSize, usage as badUsage } from './parse.js';

interface BuildFlags {
  name?: string;
  fromDir?: string;
  debian?: string;
  busybox?: boolean;
  packages?: string;
  mirror?: string;
  size?: string;
  force?: boolean;
  json?: boolean;
  /** `--no-boot-snapshot`: false. */
  bootSnapshot?: boolean;
}

export function register(image: Command): void {
  bootSnapshotFlag(image.command('build'))
    .description('build an image from a directory, the host busybox, or a Debian suite')
    .option('--name <name>', 'image name: a-z, 0-9, ".", "_", "-"')
    .option('--from-dir <dir>', 'pack this directory tree')
    .option('--busybox', "the host's static busybox with its applets (offline)")
    .option('--debian <suite>', 'debootstrap a minimal Debian suite (needs root), e.g. bookworm')
    .option('--packages <list>', 'with --debian: extra packages, comma-separated')
    .option('--mirror <url>', "with --debian: archive URL (default: the host's apt mirror)")
    .option('--size <size>', 'filesystem size like 512M or 2G (default: 2 × content + 128M)')
    .option('--force', 'replace an existing image of that name')
    .option('--json', 'machine-readable output')
    .action(action(build));
  image
    .command('rm <name>')
    .description('remove an image')
    .option('--json', 'machine-readable output')
    .action(
      action(async (name: string, opts: { json?: boolean }) => {
        const removed = await remove(parseName(name, 'the image name'));
        if (opts.json) printJson(removed);
        else process.stdout.write(`removed image ${removed.name}\n`);
      }),
    );
  image
    .command('ls')
    .description('list images (same as `forkd images`)')
    .option('--json', 'machine-readable output')
    .action(action(showImages));
  registerOci(image);
}

/**
 * Through the daemon when one runs: it also ends the pool VMs of the image's boot
 * snapshots, which a removal behind its back would leave running.
 */
async function remove(name: string): Promise<{ name: string }> {
  const daemon = await findDaemon();
  if (!daemon) return removeImage(paths(), name);
  const image = await daemon.images.get(name);
  await daemon.images.remove(name);
  return { ...imageToWire(image), name: image.name };
}

async function build(flags: BuildFlags): Promise<void> {
  const common: BuildOptions = {
    name: parseName(required(flags.name, '--name NAME'), '--name'),
    sizeMiB: flags.size === undefined ? undefined : parseSize(flags.size, '--size'),
    force: flags.force,
  };
  const say: Progress | undefined = flags.json
    ? undefined
    : (line) => process.stderr.write(`  ${line}\n`);
  const image = await buildFrom(flags, common, say);
  // The image is built: a boot snapshot that cannot be captured is only a warning.
  const daemon = await findDaemon().catch(() => undefined);
  const where = daemon ? { daemon } : { paths: paths() };
  const warnings = await captureAfter(image.name, flags, where);
  if (flags.json) printJson(warnings.length > 0 ? { ...image, warnings } : image);
  else process.stdout.write(describeImage(image) + '\n');
}

function buildFrom(flags: BuildFlags, common: BuildOptions, say?: Progress): Promise<Image> {
  const sources = [flags.fromDir, flags.debian, flags.busybox].filter((s) => s !== undefined);
  if (sources.length !== 1) {
    throw usage('pass exactly one of --from-dir DIR, --busybox, --debian SUITE');
  }
  if (flags.debian === undefined && (flags.packages || flags.mirror)) {
    throw usage('--packages and --mirror go with --debian SUITE');
  }
  const p = paths();
  if (flags.fromDir !== undefined)
    return buildImageFromDir(p, { ...common, dir: flags.fromDir }, say);
  if (flags.busybox) return buildBusyboxImage(p, common, say);
  const packages = flags.packages
    ?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  return buildDebianImage(
    p,
    { ...common, suite: required(flags.debian, '--debian SUITE'), packages, mirror: flags.mirror },
    say,
  );
}

function required(value: string | undefined, flag: string): string {
  if (value) return value;
  throw usage(`missing ${flag}`);
}

function usage(message: string): ForkdError {
  return badUsage(`${message} (see \`forkd image build --help\`)`);
}
