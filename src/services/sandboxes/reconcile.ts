/**
 * Crash recovery: on start the daemon makes the store agree with the host. A sandbox whose
 * QEMU still runs (the pid is alive and its /proc cmdline names the sandbox's dir, so a
 * recycled pid is never trusted) is re-adopted: monitor and agent reconnected (the agent's
 * 0xFF + sync starts a fresh session), a boot cut short is finished. Any other
 * starting/running row becomes `dead` and its files go. Directories with no row are swept
 * unless the process that made them (a `forkd run`) still runs. A re-adopted QEMU is put
 * back in its cgroup with its limits (every other cgroup of this daemon's is removed) and
 * gets its DNS proxy and published ports back. A hibernated sandbox has no QEMU to find: it
 * is held again as it is, on its capture (hibernate.ts), until a request wakes it.
 */
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Paths } from '../../config.js';
import { AgentClient } from '../../drivers/agent/client.js';
import type { SandboxRow, SandboxRows } from '../../store/sandboxes.js';
import type { Limiter } from '../limits.js';
import { connectGuest, OWNER_FILE, sandboxVmSpec } from './sandbox.js';
import { wasHalted } from './halt.js';
import { onDisk } from './tiers.js';
import { commitStaged, discardStaged, hibernationFiles, ramBaseOf } from './hibernate.js';
import { keepConsoleLog, removeLeftovers } from './leftovers.js';
import type { ServiceLog } from '../log.js';
import { pidAlive } from '../../util/pid.js';
import type { VmHandle } from '../../drivers/vmm.js';
import { vmm } from '../vmm.js';

export interface ReconcileContext {
  paths: Paths;
  rows: SandboxRows;
  log: ServiceLog;
  pollMs: number;
  bootTimeoutMs: number;
  limiter: Limiter;
  /** Hand a re-adopted sandbox (now `running`) to the service. */
  adopt(row: SandboxRow, vm: VmHandle, agent: AgentClient): void;
  /** Hand a hibernated sandbox (no QEMU, its capture on disk) to the service. */
  adoptHibernated(row: SandboxRow): void | Promise<void>;
  /** Take its network over again (DNS proxy, published ports); a failure is only logged. */
  adoptNetwork?(row: SandboxRow, vm: VmHandle): Promise<void>;
}

/** What a reconcile did, by sandbox id / dir name. */
export interface ReconcileReport {
  adopted: string[];
  dead: string[];
  /** Directories removed that had no live sandbox (ended rows, no row at all). */
  swept: string[];
  /** Cgroups removed that had no live sandbox (by sandbox id). */
  cgroups: string[];
}

/** How long a re-adopted running guest has to answer the new agent session. */
const READOPT_AGENT_TIMEOUT_MS = 15_000;

export async function reconcile(ctx: ReconcileContext): Promise<ReconcileReport> {
  const report: ReconcileReport = { adopted: [], dead: [], swept: [], cgroups: [] };
  await Promise.all(
    ctx.rows.active().map(async (row) => {
      const adopted = await recover(ctx, row);
      (adopted ? report.adopted : report.dead).push(row.id);
    }),
  );
  report.swept.push(...(await sweepEndedDirs(ctx)), ...(await sweepOrphanDirs(ctx)));
  report.cgroups.push(...(await ctx.limiter.sweep(new Set(report.adopted))));
  ctx.log.info(report, 'reconciled sandboxes with the host');
  return report;
}

/** Re-adopt one starting/running row, or bury it. True when it runs again. */
async function recover(ctx: ReconcileContext, row: SandboxRow): Promise<boolean> {
  if (row.state === 'running' && onDisk(row.tier)) return holdOnDisk(ctx, row);
  const pid = row.pid ?? (await vmm().readPid(row.dir));
  if (pid === undefined || !(await vmm().isVmOf(pid, row.dir))) {
    const when = row.state === 'starting' ? 'during its boot, ' : '';
    await bury(ctx, row, `QEMU exited ${when}while the daemon was down`);
    return false;
  }
  try {
    const { vm, agent } = await adopt(ctx, row, pid);
    await reattachCgroup(ctx, row, pid);
    await ctx
      .adoptNetwork?.(row, vm)
      .catch((e: unknown) =>
        ctx.log.warn(
          { sandbox: row.id, err: e },
          'a re-adopted sandbox lost its DNS proxy or ports',
        ),
      );
    await discardStaged(row.dir); // a hibernation cut short before its tier was recorded
    const running = ctx.rows.update(row.id, { state: 'running', pid }) as SandboxRow;
    ctx.adopt(running, vm, agent);
    ctx.log.info({ sandbox: row.id, pid, was: row.state }, 'sandbox re-adopted');
    return true;
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    await bury(ctx, row, `could not re-adopt its QEMU after a daemon restart: ${why}`, pid);
    return false;
  }
}

/**
 * A hibernated or halted sandbox is held again while what its wake needs is complete (a
 * capture's image is written last; a halt's record is written before its QEMU ends). The
 * tier is recorded before its QEMU ends (and a staged capture takes its names), so a daemon
 * that died in between left a QEMU (stopped: ended now) or staged files (put in place now).
 */
async function holdOnDisk(ctx: ReconcileContext, row: SandboxRow): Promise<boolean> {
  const halted = row.tier === 'halted';
  const pid = row.pid ?? (await vmm().readPid(row.dir));
  if (pid !== undefined) await vmm().killVerified(pid, row.dir);
  if (!halted) await commitStaged(row.dir);
  await ctx.limiter.remove(row.id); // no cgroup until its wake
  const kept = halted ? wasHalted(row.dir) : existsSync(hibernationFiles(row.dir).image);
  if (!kept) {
    const what = halted ? 'its halt record' : 'its capture';
    await bury(ctx, row, `${row.tier}, but ${what} is missing from its directory`);
    return false;
  }
  // A pid left in the row is of the QEMU it had (a crash before the tier's move finished).
  await ctx.adoptHibernated(ctx.rows.update(row.id, { pid: null }) as SandboxRow);
  ctx.log.info({ sandbox: row.id, tier: row.tier }, 'sandbox on disk held again');
  return true;
}

/** Reconnect monitor and agent; a row still `starting` gets the rest of its boot. */
async function adopt(
  ctx: ReconcileContext,
  row: SandboxRow,
  pid: number,
): Promise<{ vm: VmHandle; agent: AgentClient }> {
  const { accel } = await vmm().accel();
  const spec = sandboxVmSpec(
    row.dir,
    { memoryMiB: row.memory_mib, cpus: row.cpus, accel },
    ramBaseOf(ctx.paths, row),
  );
  const vm = await vmm().adopt(spec, pid, { pollMs: ctx.pollMs });
  try {
    await refuseUnrestored(vm);
    await resumeIfPaused(ctx, row, vm);
    await reapFrozenForks(ctx, row, vm);
    const agent =
      row.state === 'starting'
        ? await connectGuest(vm, row.id, { env: row.env, bootTimeoutMs: ctx.bootTimeoutMs })
        : await vm.guard(
            AgentClient.connect(vm.files.agent, { timeoutMs: READOPT_AGENT_TIMEOUT_MS }),
            'reconnecting to the guest agent',
          );
    // A paused sandbox ran only for the agent's handshake: it stays in its tier.
    if (row.tier === 'paused') await vm.pause();
    return { vm, agent };
  } catch (e) {
    vm.detach(); // the caller kills the verified pid
    throw e;
  }
}

/**
 * A fork child whose daemon died before it loaded the snapshot's state waits in
 * `-incoming` for ever (the state came on a descriptor of the dead daemon): it is buried
 * with that reason, under its request's label, at once rather than after a boot timeout.
 */
async function refuseUnrestored(vm: VmHandle): Promise<void> {
  if ((await vm.status()) === 'inmigrate') {
    throw new Error('the daemon stopped before its restore from the snapshot finished');
  }
}

/**
 * A daemon killed in the middle of a branch leaves its source stopped (between `stop` and
 * `cont`): resume it, the half-made snapshot is discarded by the snapshot service. A
 * sandbox paused in tier `paused` is resumed too, only until its agent session is back.
 */
async function resumeIfPaused(ctx: ReconcileContext, row: SandboxRow, vm: VmHandle): Promise<void> {
  if ((await vm.status()) !== 'paused') return;
  if (row.tier !== 'paused') {
    ctx.log.warn({ sandbox: row.id }, 'resuming a sandbox left paused by an interrupted branch');
  }
  await vm.resume();
}

/**
 * A daemon killed during a live branch's copy takes its copier with it, and the copier's
 * frozen fork of QEMU dies too, but stays a zombie until QEMU reaps it: make it.
 */
async function reapFrozenForks(
  ctx: ReconcileContext,
  row: SandboxRow,
  vm: VmHandle,
): Promise<void> {
  const { zombies, reaped } = await vmm().reapLiveForks(vm);
  if (zombies)
    ctx.log.warn({ sandbox: row.id, zombies, reaped }, 'reaped frozen forks of a live branch');
}

/**
 * A re-adopted QEMU never left its cgroup (it outlives the daemon), but the cgroup may have
 * been removed or its limits changed meanwhile: make it agree with the row again. A failure
 * leaves the sandbox running, unlimited, and says so.
 */
async function reattachCgroup(ctx: ReconcileContext, row: SandboxRow, pid: number) {
  if (!row.limits) return;
  await ctx.limiter
    .reattach(row.id, row.limits, pid)
    .catch((e: unknown) =>
      ctx.log.warn({ sandbox: row.id, err: e }, 'a re-adopted sandbox runs outside its cgroup'),
    );
}

async function bury(ctx: ReconcileContext, row: SandboxRow, reason: string, pid?: number) {
  ctx.log.warn({ sandbox: row.id, reason }, 'sandbox is dead');
  await keepConsoleLog(ctx.paths.home, row.id, row.dir).catch(() => undefined);
  await removeLeftovers(row.dir, pid ?? row.pid);
  await ctx.limiter.remove(row.id);
  ctx.rows.update(row.id, { state: 'dead', reason, pid: null, tier: 'running' });
}

/** Ended rows whose directory survived (a crash between ending the VM and removing it). */
async function sweepEndedDirs(ctx: ReconcileContext): Promise<string[]> {
  const ended = [...ctx.rows.list('stopped'), ...ctx.rows.list('dead')];
  const left = ended.filter((r) => existsSync(r.dir));
  for (const r of left) await removeLeftovers(r.dir, r.pid);
  return left.map((r) => r.id);
}

/** Sandbox dirs with no row: debris of a crash, or a `forkd run` still going (kept). */
async function sweepOrphanDirs(ctx: ReconcileContext): Promise<string[]> {
  const names = await readdir(ctx.paths.sandboxes).catch(() => [] as string[]);
  const swept: string[] = [];
  for (const name of names) {
    if (ctx.rows.get(name)) continue;
    const dir = join(ctx.paths.sandboxes, name);
    const owner = await ownerPid(dir);
    if (owner !== undefined && owner !== process.pid && pidAlive(owner)) {
      ctx.log.info({ dir, owner }, 'left alone a sandbox dir another forkd process owns');
      continue;
    }
    await removeLeftovers(dir);
    swept.push(name);
  }
  return swept;
}

async function ownerPid(dir: string): Promise<number | undefined> {
  const pid = Number((await readFile(join(dir, OWNER_FILE), 'utf8').catch(() => '')).trim());
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}
