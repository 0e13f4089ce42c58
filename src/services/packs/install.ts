/**
 * Installing a verified pack from its staging dir: the plan (which snapshots of the chain
 * this host already has — same tag and same identity — and are reused, under which tag the
 * top lands, under which name the image), the rewrite (a disk layer's header names its
 * backing file by absolute path: each layer is rebased onto where its parent now is, and
 * its manifest re-hashed), then the renames, image and parents first. A failure before the
 * last rename takes back every rename it made: nothing half-installed stays.
 */
import { createHash } from 'node:crypto';
import { readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { crashPoint } from '../../util/crash.js';
import { ForkdError } from '../../errors.js';
import { imageFiles } from '../images/store.js';
import {
  describeFile,
  readManifest,
  sha256StableFile,
  snapshotDir,
  SNAPSHOT_FILES,
  validateTag,
  type SnapshotManifest,
} from '../snapshots/files.js';
import type { SnapshotRegistry } from '../snapshots/registry.js';
import { ORIGIN_FILE } from '../snapshots/origin.js';
import type { SnapshotOriginT } from '../../contract/schemas.js';
import {
  checkChain,
  imagePath,
  packInvalid,
  snapshotIdentity,
  snapshotPath,
  type PackManifest,
} from './manifest.js';
import { vmm } from '../vmm.js';

/** Where an installed snapshot came from (`origin.json` beside its manifest). */
export type Origin = SnapshotOriginT;

export interface InstallContext {
  paths: Paths;
  registry: SnapshotRegistry;
  /** Remove a snapshot that `force` replaces (refused while it is in use). */
  remove(tag: string): Promise<void>;
}

export interface InstallOptions {
  tag?: string;
  force?: boolean;
  /**
   * Name snapshots by content (a pull by reference): each snapshot of the chain that this
   * host has under any tag is reused, the others land under `ref-<identity prefix>`, so a
   * pull never collides with a local tag and two references to one content share it.
   */
  byContent?: boolean;
}

/** The tag a snapshot pulled by content is installed under. */
export const contentTag = (m: SnapshotManifest): string =>
  `ref-${createHash('sha256').update(snapshotIdentity(m)).digest('hex').slice(0, 16)}`;

/**
 * Snapshots of the chain this host holds under any tag with the same identity: pack tag →
 * local tag (for `byContent`: reused wherever they are).
 */
export async function sameContentHere(
  registry: SnapshotRegistry,
  pack: PackManifest,
  manifests: Map<string, SnapshotManifest>,
): Promise<Map<string, string>> {
  const byIdentity = new Map<string, string>();
  for (const [tag, m] of await registry.manifests()) {
    if (registry.isPublished(tag)) byIdentity.set(snapshotIdentity(m), tag);
  }
  const out = new Map<string, string>();
  for (const tag of pack.chain) {
    const m = manifests.get(tag);
    const local = m && byIdentity.get(snapshotIdentity(m));
    if (local) out.set(tag, local);
  }
  return out;
}

export interface Installed {
  tag: string;
  /** Snapshots written, root first. */
  installed: string[];
  /** Snapshots of the chain this host already had. */
  reused: string[];
  image: string | null;
}

/** The snapshot manifests of a staged pack, by tag, checked against the pack manifest. */
export async function stagedManifests(
  staging: string,
  pack: PackManifest,
): Promise<Map<string, SnapshotManifest>> {
  const out = new Map<string, SnapshotManifest>();
  const sums = new Map(pack.files.map((f) => [f.path, f]));
  for (const tag of pack.chain) {
    const path = snapshotPath(tag, 'manifest.json');
    if (!sums.has(path)) continue; // reported by checkChain as the missing parent
    const m = JSON.parse(await readFile(join(staging, path), 'utf8')) as SnapshotManifest;
    for (const f of Object.values(m.files)) {
      const listed = sums.get(snapshotPath(tag, f.name));
      if (listed?.sha256 !== f.sha256) {
        throw packInvalid(
          `snapshot "${tag}" names ${f.name}, which the pack does not hold as recorded`,
        );
      }
    }
    out.set(tag, m);
  }
  checkChain(pack, out);
  return out;
}

/** The chain tags this host already has with the same content (reused, not installed). */
export async function reusable(
  p: Paths,
  registry: SnapshotRegistry,
  pack: PackManifest,
  manifests: Map<string, SnapshotManifest>,
): Promise<Set<string>> {
  const reuse = new Set<string>();
  for (const tag of pack.chain.slice(0, -1)) {
    if (!registry.isPublished(tag)) continue;
    const here = await readManifest(p, tag);
    if (snapshotIdentity(here) !== snapshotIdentity(manifests.get(tag) as SnapshotManifest)) {
      throw new ForkdError(
        'name_taken',
        `this host has another snapshot "${tag}"; the pack's chain needs that tag for its own parent: remove or compact the local one first`,
        { tag },
      );
    }
    reuse.add(tag);
  }
  return reuse;
}

/** Install the staged pack (verified already). */
export async function installPack(
  ctx: InstallContext,
  staging: string,
  pack: PackManifest,
  opts: InstallOptions,
  origin: Origin,
): Promise<Installed> {
  const manifests = await stagedManifests(staging, pack);
  if (opts.byContent) return installByContent(ctx, staging, pack, manifests, origin);
  const reuse = await reusable(ctx.paths, ctx.registry, pack, manifests);
  const top = opts.tag ?? pack.tag;
  validateTag(top);
  if (pack.chain.slice(0, -1).includes(top)) {
    throw new ForkdError('bad_request', `--tag ${top} is the tag of a parent in the pack's chain`, {
      tag: top,
    });
  }
  const replace = ctx.registry.isPublished(top) || ctx.registry.isFailed(top);
  if (replace && !opts.force) {
    throw new ForkdError(
      'name_taken',
      `snapshot "${top}" already exists: unpack with --tag NEW, or --force to replace it`,
      { tag: top },
    );
  }
  const image = await planImage(ctx.paths, staging, pack);
  const finalTag = (tag: string) => (tag === pack.tag ? top : tag);
  const todo = pack.chain.filter((t) => !reuse.has(t));
  for (const tag of todo) {
    const m = manifests.get(tag) as SnapshotManifest;
    await rewrite(
      ctx.paths,
      join(staging, 'snapshots', tag),
      {
        ...m,
        tag: finalTag(tag),
        image: image.name ?? m.image,
      },
      origin,
    );
  }
  if (replace) await ctx.remove(top);
  return commit(ctx, staging, { todo, finalTag, image, reuse: [...reuse], top });
}

/** installPack for `byContent`: reuse what is here under any tag, the rest under content tags. */
async function installByContent(
  ctx: InstallContext,
  staging: string,
  pack: PackManifest,
  manifests: Map<string, SnapshotManifest>,
  origin: Origin,
): Promise<Installed> {
  const here = await sameContentHere(ctx.registry, pack, manifests);
  const finalTag = (t: string) => here.get(t) ?? contentTag(manifests.get(t) as SnapshotManifest);
  const top = finalTag(pack.tag);
  const todo = pack.chain.filter((t) => !here.has(t));
  if (todo.length === 0) {
    return { tag: top, installed: [], reused: pack.chain.map(finalTag), image: null };
  }
  const image = await planImage(ctx.paths, staging, pack);
  for (const tag of todo) {
    const m = manifests.get(tag) as SnapshotManifest;
    const parent = m.parent ? finalTag(m.parent) : null;
    const diff = m.memory_diff && { ...m.memory_diff, parent: finalTag(m.memory_diff.parent) };
    const moved = { ...m, tag: finalTag(tag), parent, image: image.name ?? m.image };
    await rewrite(
      ctx.paths,
      join(staging, 'snapshots', tag),
      diff ? { ...moved, memory_diff: diff } : moved,
      origin,
    );
  }
  const reuse = pack.chain.filter((t) => here.has(t)).map(finalTag);
  return commit(ctx, staging, { todo, finalTag, image, reuse, top });
}

interface ImagePlan {
  name: string | null;
  /** The staged image dir to rename into place (absent: this host has it already). */
  staged?: string;
}

/**
 * The image the chain boots on: this host's image of that name when its rootfs is the
 * same file, else the pack's under that name, or (when the name holds another image)
 * under `NAME-<sha256 prefix>`.
 */
async function planImage(p: Paths, staging: string, pack: PackManifest): Promise<ImagePlan> {
  if (!pack.image) return { name: null };
  const want = pack.files.find((f) => f.path === imagePath(pack.image!.name, 'rootfs.ext4'));
  if (!want) throw packInvalid(`the pack lacks the rootfs of image "${pack.image.name}"`);
  const staged = join(staging, 'images', pack.image.name);
  for (const name of [pack.image.name, `${pack.image.name}-${want.sha256.slice(0, 12)}`]) {
    const rootfs = imageFiles(p, name).rootfs;
    const have = await stat(rootfs).then(
      (s) => s.size === want.size,
      () => undefined,
    );
    if (have === undefined) return { name, staged };
    if (have && (await sha256StableFile(rootfs)) === want.sha256) return { name };
  }
  throw new ForkdError(
    'name_taken',
    `this host has other images named "${pack.image.name}" and its sha256 variant: remove one`,
    { image: pack.image.name },
  );
}

/** Point a staged snapshot's disk layer at its final parent, re-hash it, write its manifest. */
async function rewrite(p: Paths, dir: string, m: SnapshotManifest, origin: Origin) {
  const backing = m.parent
    ? join(snapshotDir(p, m.parent), SNAPSHOT_FILES.disk)
    : m.image
      ? imageFiles(p, m.image).rootfs
      : null;
  if (backing) {
    const fmt = m.parent ? 'qcow2' : 'raw';
    const disk = join(dir, SNAPSHOT_FILES.disk);
    await vmm().disks.setBacking(disk, backing, fmt);
    m.files.disk = await describeFile(dir, SNAPSHOT_FILES.disk);
  }
  await writeFile(join(dir, 'manifest.json'), JSON.stringify(m, null, 2) + '\n');
  await writeFile(join(dir, ORIGIN_FILE), JSON.stringify(origin) + '\n');
}

/** The renames: image, then the snapshots root first; any failure takes them all back. */
async function commit(
  ctx: InstallContext,
  staging: string,
  plan: {
    todo: string[];
    finalTag: (t: string) => string;
    image: ImagePlan;
    reuse: string[];
    top: string;
  },
): Promise<Installed> {
  const done: string[] = [];
  let imageDir: string | undefined;
  try {
    if (plan.image.staged && plan.image.name) {
      imageDir = imageFiles(ctx.paths, plan.image.name).dir;
      await rename(plan.image.staged, imageDir);
    }
    for (const tag of plan.todo) {
      const final = plan.finalTag(tag);
      ctx.registry.reserve(final, null);
      try {
        await rename(join(staging, 'snapshots', tag), snapshotDir(ctx.paths, final));
      } catch (e) {
        await ctx.registry.release(final);
        throw e;
      }
      done.push(final);
      ctx.registry.markReady(final, await readManifest(ctx.paths, final));
      crashPoint('pack:installed');
    }
  } catch (e) {
    for (const tag of done.reverse()) await ctx.registry.delete(tag);
    if (imageDir) await rm(imageDir, { recursive: true, force: true });
    throw e;
  }
  return {
    tag: plan.top,
    installed: plan.todo.map(plan.finalTag),
    reused: plan.reuse,
    image: plan.image.name,
  };
}
