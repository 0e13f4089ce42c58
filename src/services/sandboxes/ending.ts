/**
 * How a sandbox stops being held: ended on purpose (a kill, its timeout, a hibernation that
 * could not be written) or found dead (its QEMU exited and nobody asked: the reason says
 * why, an OOM kill by its cgroup included). Either way its QEMU, network, cgroup and
 * directory go, its console log is kept, and its row says how it ended.
 */
import { rm } from 'node:fs/promises';
import type { AgentClient } from '../../drivers/agent/client.js';
import type { VmExit, VmHandle } from '../../drivers/vmm.js';
import type { SandboxRow } from '../../store/sandboxes.js';
import { formatSize } from '../limits.js';
import { vmm } from '../vmm.js';
import { forgetLogs, keepConsoleLog, lastConsoleLine, removeLeftovers } from './leftovers.js';
import type { Live } from './live.js';
import type { SandboxParts } from './parts.js';

/** Stopped and dead rows are forgotten this long after they ended, by default. */
const RETAIN_ENDED_MS = 24 * 3600 * 1000;

export class Endings {
  /** The daemon let go of its sandboxes: a QEMU exit from now on is not a death. */
  private detached = false;

  constructor(private readonly p: SandboxParts) {}

  /** Hold a running sandbox: arm its timeout, watch its QEMU. */
  register(row: SandboxRow, vm: VmHandle, agent: AgentClient): void {
    const live = this.p.table.hold(row);
    live.vm = vm;
    live.agent = agent;
    this.watch(live, vm);
  }

  /** Notice when this QEMU of the sandbox exits on its own. */
  watch(live: Live, vm: VmHandle): void {
    void vm.waitExit().then((exit) => this.onVmExit(live, vm, exit));
  }

  detach(): void {
    this.detached = true;
  }

  /** End a live sandbox once (concurrent callers share the same ending). */
  end(id: string, state: 'stopped' | 'dead', reason: string): Promise<void> {
    const { table } = this.p;
    const pending = table.ending.get(id);
    if (pending) return pending;
    const live = table.get(id);
    if (!live) return Promise.resolve();
    const ending = this.endLive(live, state, reason).finally(() => table.ending.delete(id));
    table.ending.set(id, ending);
    return ending;
  }

  private async endLive(live: Live, state: 'stopped' | 'dead', reason: string): Promise<void> {
    const { id } = live;
    this.p.table.timers.clear(id);
    // Waits for a move under way (a capture, a restore): what it leaves is ended too.
    await live.turn;
    const vm = live.vm;
    live.vm = undefined;
    live.agent?.close();
    await vm?.kill();
    await this.release(id, state, async () => reason);
    this.p.table.drop(id);
    await keepConsoleLog(this.p.paths.home, id, live.dir).catch(() => undefined);
    await rm(live.dir, { recursive: true, force: true });
  }

  /** Its timeout passed: stop it (reason `timeout`). */
  async expire(id: string): Promise<void> {
    this.p.log.info({ sandbox: id }, 'sandbox timed out');
    await this.end(id, 'stopped', 'timeout').catch((e: unknown) =>
      this.p.log.error({ sandbox: id, err: e }, 'could not stop a timed-out sandbox'),
    );
  }

  /** The reason recorded for a sandbox whose QEMU exited, waiting up to 2 s for it. */
  async reasonOnceDead(id: string): Promise<string | null> {
    for (let i = 0; i < 40; i++) {
      const row = this.p.table.rows.get(id);
      if (!row || row.state === 'dead') return row?.reason ?? null;
      await new Promise((r) => setTimeout(r, 50));
    }
    return null;
  }

  /** Forget the rows (and kept console logs) of sandboxes that ended `retainMs` ago. */
  forgetEnded(retainMs = RETAIN_ENDED_MS): void {
    const { rows } = this.p.table;
    const n = rows.pruneEnded(new Date(Date.now() - retainMs).toISOString());
    if (n > 0) this.p.log.info({ count: n }, 'forgot ended sandboxes');
    const known = (id: string) => rows.get(id) !== undefined;
    void forgetLogs(this.p.paths.home, known).catch(() => undefined);
  }

  /** QEMU exited and nobody asked: the sandbox is dead; say why, clean up. */
  private async onVmExit(live: Live, vm: VmHandle, exit: VmExit): Promise<void> {
    const { table, log } = this.p;
    if (this.detached || table.ending.has(live.id) || table.get(live.id) !== live) return;
    if (live.vm !== vm) return; // ended on purpose (hibernated), or an earlier QEMU of it
    table.drop(live.id);
    live.agent?.close();
    const reason = await this.release(
      live.id,
      'dead',
      async () => (await this.oomReason(live.id)) ?? (await deathReason(live.dir, exit)),
    );
    log.warn({ sandbox: live.id, reason }, 'sandbox died');
    await keepConsoleLog(this.p.paths.home, live.id, live.dir).catch(() => undefined);
    await removeLeftovers(live.dir).catch((e: unknown) =>
      log.error({ sandbox: live.id, err: e }, 'could not clean up a dead sandbox'),
    );
  }

  /**
   * What both endings do once its QEMU is gone: its network and cgroup go, its row says how
   * it ended. The reason is read before the cgroup goes (an OOM kill is counted there).
   */
  private async release(
    id: string,
    state: 'stopped' | 'dead',
    reasonOf: () => Promise<string>,
  ): Promise<string> {
    await this.p.network?.release(id);
    const reason = await reasonOf();
    await this.p.limiter.remove(id);
    this.p.table.rows.update(id, { state, reason, pid: null, tier: 'running' });
    return reason;
  }

  /** Why a QEMU that died was killed by the host at its memory limit, if it was. */
  private async oomReason(id: string): Promise<string | undefined> {
    const usage = await this.p.limiter.usage(id).catch(() => undefined);
    if (!usage?.oomKills) return undefined;
    const limit = this.p.table.rows.get(id)?.limits?.memory_bytes;
    const at = limit ? ` of ${formatSize(limit)}` : '';
    return `out of memory: its QEMU reached the memory limit${at} (limits.memory) and the host's OOM killer ended it; give it a larger limit or less guest RAM`;
  }
}

async function deathReason(dir: string, exit: VmExit): Promise<string> {
  const how =
    exit.signal !== null
      ? `killed by ${exit.signal}`
      : exit.code !== null
        ? `exit code ${exit.code}`
        : 'no status';
  const last = await lastConsoleLine(vmm().filesOf(dir).console);
  return `QEMU exited on its own (${how})${last ? `; last console line: ${last}` : ''}`;
}
