/**
 * Debian images: `debootstrap --variant=minbase` into the staging dir, tidied of host
 * leftovers and package indexes, then packed like any other tree. Packages are cached
 * under FORKD_HOME/cache/debootstrap so rebuilding does not download them again.
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { ForkdError } from '../../errors.js';
import { runStreaming } from '../../util/exec.js';
import { findAptMirror } from './apt-sources.js';
import { buildImage, type BuildOptions, type Progress } from './build.js';
import { BASE_ETC } from './busybox.js';
import { validateImageName, type Image } from './store.js';

/** What a Debian build takes besides the common options. */
export interface DebianOptions extends BuildOptions {
  /** A suite debootstrap knows: bookworm, trixie, … */
  suite: string;
  /** Extra packages on top of minbase. */
  packages?: string[];
  /** Default: the host's apt mirror for that suite. */
  mirror?: string;
}

const DEBOOTSTRAP_SCRIPTS = '/usr/share/debootstrap/scripts';
const SUITE_RULE = /^[a-z][a-z0-9-]{0,31}$/;
/** Debian policy 5.6.7, so a "package" can never be read as a debootstrap option. */
const PACKAGE_RULE = /^[a-z0-9][a-z0-9+.-]+$/;

/** Build a Debian image with debootstrap (needs root and network, or a warm cache). */
export async function buildDebianImage(
  p: Paths,
  opts: DebianOptions,
  onProgress: Progress = () => undefined,
): Promise<Image> {
  validateImageName(opts.name);
  const packages = opts.packages ?? [];
  validateSuite(opts.suite);
  validatePackages(packages);
  requireRoot();
  const mirror = opts.mirror ?? (await hostMirror(opts.suite));
  validateMirror(mirror);
  const cacheDir = join(p.home, 'cache', 'debootstrap');
  await mkdir(cacheDir, { recursive: true });
  const args = ['--variant=minbase', `--cache-dir=${cacheDir}`];
  if (packages.length > 0) args.push(`--include=${packages.join(',')}`);
  const source = { kind: 'debian' as const, suite: opts.suite, packages, mirror };
  const bootstrap = async (root: string) => {
    onProgress(`debootstrap ${opts.suite} from ${mirror}`);
    await runStreaming('debootstrap', [...args, opts.suite, root, mirror], onProgress);
    await tidy(root);
  };
  return buildImage(p, opts, source, bootstrap, onProgress);
}

function validateSuite(suite: string): void {
  if (SUITE_RULE.test(suite) && existsSync(join(DEBOOTSTRAP_SCRIPTS, suite))) return;
  throw new ForkdError(
    'bad_request',
    `debootstrap does not know the suite ${JSON.stringify(suite)}: use one listed in ` +
      `${DEBOOTSTRAP_SCRIPTS} (bookworm, trixie, …), or upgrade debootstrap`,
    { suite },
  );
}

function validatePackages(packages: string[]): void {
  const bad = packages.filter((p) => !PACKAGE_RULE.test(p));
  if (bad.length === 0) return;
  throw new ForkdError(
    'bad_request',
    `invalid package name(s) ${bad.map((b) => JSON.stringify(b)).join(', ')}: pass Debian ` +
      'package names separated by commas, e.g. --packages python3,curl',
    { packages: bad },
  );
}

function validateMirror(mirror: string): void {
  let protocol = '';
  try {
    protocol = new URL(mirror).protocol;
  } catch {
    // reported below
  }
  if (['http:', 'https:', 'file:'].includes(protocol)) return;
  throw new ForkdError(
    'bad_request',
    `invalid mirror ${JSON.stringify(mirror)}: pass an http(s):// or file:// URL of a Debian archive`,
    { mirror },
  );
}

/** debootstrap creates device nodes and chroots: both need root. */
function requireRoot(): void {
  if (process.getuid?.() === 0) return;
  throw new ForkdError(
    'setup_required',
    'building a Debian image needs root (debootstrap creates device nodes and chroots): ' +
      'run it as root, or debootstrap a directory yourself and use `forkd image build --from-dir`',
  );
}

async function hostMirror(suite: string): Promise<string> {
  const mirror = await findAptMirror(suite);
  if (mirror) return mirror;
  throw new ForkdError(
    'setup_required',
    `the host's apt sources name no Debian mirror for ${suite}: pass --mirror URL`,
    { suite },
  );
}

/**
 * Drop what only made sense on the build host: package indexes and downloaded .debs
 * (apt-get update refetches them) and the host's resolv.conf that debootstrap copied in;
 * add forkd's hostname and hosts.
 */
async function tidy(root: string): Promise<void> {
  await emptyDir(join(root, 'var/lib/apt/lists'));
  await emptyDir(join(root, 'var/cache/apt/archives'));
  await replaceFile(join(root, 'etc/resolv.conf'), '');
  for (const [file, text] of Object.entries(BASE_ETC)) await replaceFile(join(root, file), text);
}

/** Unlink first: writing through a symlink in the tree could land on the host's file. */
async function replaceFile(path: string, text: string): Promise<void> {
  await rm(path, { force: true });
  await writeFile(path, text, { flag: 'wx', mode: 0o644 });
}

/** Delete the files (not the subdirectories apt expects, like `partial/`) of a dir. */
async function emptyDir(dir: string): Promise<void> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  await Promise.all(entries.filter((e) => !e.isDirectory()).map((e) => rm(join(dir, e.name))));
}
