/**
 * `forkd image pull|import|inspect|prune`: OCI and Docker images through the daemon (SDK).
 * Progress goes to stderr — on a terminal one line per layer redrawn as its bytes arrive,
 * otherwise one line per step — and nothing with `--json`; the result goes to stdout.
 */
import type { Command } from 'commander';
import { Forkd, type ImageInfo, type ImageProgress } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { IMAGE, IMAGE_CONFIG, toWire } from '@forkd/sdk/wire';
import { action, formatBytes, printJson } from './output.js';
import { parseName, parseSize } from './parse.js';

export interface PullFlags extends DaemonFlags {
  name?: string;
  platform?: string;
  size?: string;
  force?: boolean;
  json?: boolean;
  /** `--no-boot-snapshot`: false. */
  bootSnapshot?: boolean;
}

export function register(image: Command): void {
  daemonOptions(
    pullFlags(image.command('pull').description('pull an OCI/Docker image from a registry'))
      .argument('<ref>', 'REGISTRY/REPOSITORY[:TAG][@DIGEST]')
      .option('--force', 'rebuild even when the image already has this digest')
      .option('--json', 'machine-readable output, no progress'),
  ).action(action(pull));
  daemonOptions(
    pullFlags(
      image
        .command('import')
        .description('import an OCI layout (dir or tar) or a `docker save` archive')
        .argument('<path>', 'file or directory on the daemon host')
        .option('--ref <tag>', 'which image of a multi-image archive')
        .option('--force', 'replace an existing image of that name')
        .option('--json', 'machine-readable output, no progress'),
    ),
  ).action(action(importArchive));
  daemonOptions(
    image
      .command('inspect')
      .description("an image's source and config (Env, WorkingDir, User, Entrypoint, Cmd)")
      .argument('<name>', 'image name')
      .option('--json', 'machine-readable output'),
  ).action(action(inspect));
  daemonOptions(
    image
      .command('prune')
      .description('remove cached layers that no image uses')
      .option('--json', 'machine-readable output'),
  ).action(action(prune));
}

/** The flags a pull takes (also `forkd from-image`). */
export function pullFlags(cmd: Command): Command {
  return cmd
    .option('--name <name>', 'image name (default: the repository name)')
    .option('--platform <os/arch>', 'platform of a multi-arch image', 'linux/amd64')
    .option('--size <size>', 'filesystem size like 512M or 2G (default: 2 × content + 128M)')
    .option(
      '--no-boot-snapshot',
      "do not capture the image's boot snapshot now (its first start captures it)",
    );
}

/** Pull through the daemon with progress on stderr; shared with `from-image`. */
export async function pullImage(ref: string, flags: PullFlags): Promise<ImageInfo> {
  const forkd = new Forkd(clientConfig(flags));
  const bar = flags.json ? undefined : progressPrinter();
  try {
    return await forkd.images.pull({
      reference: ref,
      ...buildOptions(flags),
      onProgress: bar,
    });
  } finally {
    bar?.end();
  }
}

function buildOptions(flags: PullFlags) {
  return {
    name: flags.name === undefined ? undefined : parseName(flags.name, '--name'),
    platform: flags.platform,
    sizeMib: flags.size === undefined ? undefined : parseSize(flags.size, '--size'),
    force: flags.force,
    bootSnapshot: flags.bootSnapshot === false ? false : undefined,
  };
}

async function pull(ref: string, flags: PullFlags): Promise<void> {
  show(await pullImage(ref, flags), flags.json);
}

async function importArchive(path: string, flags: PullFlags & { ref?: string }): Promise<void> {
  const forkd = new Forkd(clientConfig(flags));
  const bar = flags.json ? undefined : progressPrinter();
  try {
    const { resolve } = await import('node:path');
    const opts = { path: resolve(path), ref: flags.ref, ...buildOptions(flags), onProgress: bar };
    show(await forkd.images.import(opts), flags.json);
  } finally {
    bar?.end();
  }
}

async function inspect(name: string, flags: DaemonFlags & { json?: boolean }): Promise<void> {
  const image = await new Forkd(clientConfig(flags)).images.get(parseName(name, 'the image name'));
  if (flags.json) return printJson(imageJson(image));
  const c = image.config;
  const lines: [string, string][] = [
    ['name', image.name],
    ['size', `${formatBytes(image.sizeBytes)} (${formatBytes(image.diskBytes)} on disk)`],
    ['source', JSON.stringify(image.source)],
  ];
  if (c) {
    lines.push(
      ['entrypoint', JSON.stringify(c.entrypoint ?? [])],
      ['cmd', JSON.stringify(c.cmd ?? [])],
    );
    lines.push(['workdir', c.workingDir ?? '/'], ['user', c.user ?? 'root']);
    for (const e of c.env) lines.push(['env', e]);
  }
  for (const [k, v] of lines) process.stdout.write(`${k.padEnd(11)} ${v}\n`);
}

async function prune(flags: DaemonFlags & { json?: boolean }): Promise<void> {
  const r = await new Forkd(clientConfig(flags)).images.prune();
  if (flags.json) printJson(r);
  else {
    process.stdout.write(`removed ${r.blobs} cached blobs, ${formatBytes(r.bytes)}\n`);
    for (const name of r.images) process.stdout.write(`removed unused cache image ${name}\n`);
  }
}

/** The wire form (as the API answers), for `--json`. */
export function imageJson(image: ImageInfo): Record<string, unknown> {
  const wire = toWire(IMAGE, image);
  if (image.config) wire.config = toWire(IMAGE_CONFIG, image.config);
  return wire;
}

function show(image: ImageInfo, json?: boolean): void {
  if (json) return printJson(imageJson(image));
  const from = String(image.source.reference ?? image.source.file ?? image.source.kind);
  const digest = String(image.source.digest ?? '').slice(0, 19);
  process.stdout.write(
    `image ${image.name}: ${formatBytes(image.sizeBytes)} ext4 ` +
      `(${formatBytes(image.diskBytes)} on disk), from ${from} ${digest}\n`,
  );
}

/**
 * Progress on stderr: on a terminal the current layer's line is redrawn with a bar;
 * elsewhere each step once (byte counts are left out, so logs stay short).
 */
function progressPrinter(): ((e: ImageProgress) => void) & { end(): void } {
  const tty = process.stderr.isTTY;
  let open = false;
  const say = (e: ImageProgress) => {
    if (e.total === undefined || e.current === undefined) {
      if (open) process.stderr.write('\n');
      open = false;
      process.stderr.write(`  ${e.message}\n`);
      return;
    }
    if (!tty) {
      if (e.current === e.total) process.stderr.write(`  ${e.message}\n`);
      return;
    }
    const width = 24;
    const filled = e.total ? Math.round((width * e.current) / e.total) : width;
    const bar = `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
    process.stderr.write(
      `\r\x1b[K  ${e.message} ${bar} ${formatBytes(e.current)}/${formatBytes(e.total)}`,
    );
    open = true;
  };
  return Object.assign(say, {
    end: () => {
      if (open) process.stderr.write('\n');
    },
  });
}
