/**
 * Finishing or undoing a branch's disk switch, from its recorded intent (store/intents.ts):
 * right away when a branch fails, and at every daemon start for the intents a crash left.
 * Every step is idempotent, so a daemon killed during a repair simply repeats it: a layer
 * made but never switched to is discarded; a switched-to layer gets the frozen one folded
 * back into it (so its header no longer names a disk that was never published); a branch
 * that was published only needs its row cleared. A repair that fails leaves the intent
 * (retried at the next start) and marks the sandbox with the reason and the way out.
 * Then layer files no disk uses (litter of crashes before intents existed) are removed.
 */
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { BranchIntent, BranchIntentRows } from '../../store/intents.js';
import { failPoint } from '../../util/crash.js';
import type { Lease, SandboxHost } from '../sandboxes/host.js';
import type { ServiceLog } from '../log.js';
import { vmm } from '../vmm.js';

/** What start-up recovery did with one intent. */
export type IntentOutcome = 'published' | 'undone' | 'gone' | 'broken';

/**
 * Undo a branch's disk switch; clears the intent and any earlier mark when done. On
 * failure the sandbox is marked broken (its reason says why and what to run) and the
 * error is rethrown.
 */
export async function undoIntent(
  source: Lease,
  intent: BranchIntent,
  rows: BranchIntentRows,
): Promise<void> {
  try {
    const layer = { name: intent.next_layer, file: intent.next_file, size: intent.size };
    if ((await vmm().disks.top(source.vm)).name === intent.next_layer) {
      failPoint('repair:fold');
      await vmm().disks.foldBack(source.vm, intent.frozen_layer);
      // Folded in, the frozen layer has no user left: the snapshot it was for never was.
      await rm(intent.frozen_file, { force: true });
    } else {
      await vmm().disks.discard(source.vm, layer);
    }
  } catch (e) {
    source.setDiskProblem(brokenReason(source.id, intent.tag, e));
    throw e;
  }
  rows.clear(intent.tag);
  if (source.diskProblem !== null) source.setDiskProblem(null);
}

function brokenReason(id: string, tag: string, e: unknown): string {
  const why = e instanceof Error ? e.message : String(e);
  return (
    `disk chain broken: the repair after branch "${tag}" failed (${why}); ` +
    `it is retried at every daemon start (restart \`forkd daemon\`), or end it: \`forkd kill ${id}\``
  );
}

/** Settle every intent a crash left; one that cannot be settled now waits for the next start. */
export async function recoverIntents(ctx: {
  rows: BranchIntentRows;
  sandboxes: SandboxHost;
  published: (tag: string) => boolean;
  log: ServiceLog;
}): Promise<Record<string, IntentOutcome>> {
  const out: Record<string, IntentOutcome> = {};
  for (const intent of ctx.rows.list()) {
    out[intent.tag] = await recoverOne(ctx, intent);
    ctx.log.warn(
      { sandbox: intent.sandbox, snapshot: intent.tag, outcome: out[intent.tag] },
      'settled the disk switch of an interrupted branch',
    );
  }
  return out;
}

async function recoverOne(
  ctx: Parameters<typeof recoverIntents>[0],
  intent: BranchIntent,
): Promise<IntentOutcome> {
  const source = await ctx.sandboxes.lease(intent.sandbox).catch(() => undefined);
  if (!source) {
    ctx.rows.clear(intent.tag); // its sandbox ended: its layers went with its directory
    return 'gone';
  }
  if (ctx.published(intent.tag)) {
    // Killed between publishing and clearing: the branch is whole, the source layers on it.
    source.setDiskBase(intent.tag);
    ctx.rows.clear(intent.tag);
    return 'published';
  }
  try {
    await undoIntent(source, intent, ctx.rows);
    return 'undone';
  } catch (e) {
    ctx.log.warn({ sandbox: intent.sandbox, err: e }, 'could not repair the disk chain');
    return 'broken';
  }
}

/**
 * Remove layer files in running sandboxes' dirs that their QEMU does not have open and no
 * unsettled intent names: layers of branches a crash cut off (one may name a snapshot that
 * never existed). Runs at start, before any branch can be making a layer.
 */
export async function sweepStrayLayers(ctx: {
  rows: BranchIntentRows;
  sandboxes: SandboxHost;
  log: ServiceLog;
}): Promise<string[]> {
  const kept = new Set(ctx.rows.list().flatMap((i) => [i.frozen_file, i.next_file]));
  const removed: string[] = [];
  for (const sb of await ctx.sandboxes.list({ state: 'running' })) {
    // A paused one is left paused (a lease would wake it); its strays wait for a next start.
    if (sb.tier !== undefined && sb.tier !== 'running') continue;
    const source = await ctx.sandboxes.lease(sb.id).catch(() => undefined);
    if (!source) continue;
    // Compared by inode, not by name: a layer opened under another spelling stays.
    const open = await inodes([...(await vmm().disks.openFiles(source.vm))]);
    const dir = source.vm.spec.dir;
    for (const name of (await readdir(dir)).filter((n) => vmm().disks.isLayerFile(n))) {
      const file = join(dir, name);
      const [ino] = await inodes([file]);
      if (kept.has(file) || ino === undefined || open.has(ino)) continue;
      await rm(file, { force: true });
      removed.push(file);
    }
  }
  if (removed.length) ctx.log.warn({ removed }, 'removed disk layers no sandbox uses');
  return removed;
}

async function inodes(files: string[]): Promise<Set<string>> {
  const out = new Set<string>();
  for (const f of files) {
    const st = await stat(f).catch(() => undefined);
    if (st) out.add(`${st.dev}:${st.ino}`);
  }
  return out;
}
