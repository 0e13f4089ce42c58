/**
 * The memory lent to a live branch's source (docs/limits.md, "Live branch"). While a live
 * copy runs, a frozen fork of the source's QEMU shares every page the guest had written,
 * and each one the guest writes again meanwhile is copied, charged to the sandbox's memory
 * cgroup: up to as much again as it had written. So its memory limit is raised by that for
 * the copy and put back after. The room is checked before anything is made, on an estimate
 * (what the guest has written now): a branch that asked for live is refused (`capacity`)
 * when the host cannot give it, one that named no mode is made in copy mode instead (it
 * needs none). In the pause, once the fork is made, the exact amount is topped up.
 */
import type { BranchModeT } from '../../contract/schemas.js';
import { ForkdError } from '../../errors.js';
import type { Lease } from '../sandboxes/host.js';
import type { ServiceLog } from '../log.js';
import { vmm } from '../vmm.js';

/**
 * Beside the pages the guest wrote, what a live copy may add: the frozen fork's page tables
 * (about 2 MiB per GiB of guest RAM).
 */
const MARGIN = 8 * 1024 * 1024;

type Release = () => Promise<void>;

export class CopyRoom {
  private lent = 0;
  private readonly releases: Release[] = [];

  private constructor(
    private readonly source: Lease,
    readonly mode: BranchModeT,
  ) {}

  /** The room for a branch of `source` in `mode` (`asked`: the request named it). */
  static async take(
    source: Lease,
    mode: BranchModeT,
    asked: boolean,
    log: ServiceLog,
  ): Promise<CopyRoom> {
    if (mode !== 'live') return new CopyRoom(source, mode);
    const room = new CopyRoom(source, mode);
    try {
      await room.fit((await vmm().liveCaptureBytes(source.vm)) + MARGIN, true);
      return room;
    } catch (e) {
      if (asked || !(e instanceof ForkdError) || e.code !== 'capacity') throw e;
      log.info({ sandbox: source.id, reason: e.message }, 'branching in copy mode: no room');
      return new CopyRoom(source, 'copy');
    }
  }

  /**
   * In the pause, with the fork made: lend what it shares (`sharedBytes`) if the estimate
   * fell short (the guest wrote new pages since). Checked already: not refused again.
   */
  async topUp(sharedBytes: number): Promise<void> {
    await this.fit(sharedBytes + MARGIN, false);
  }

  private async fit(bytes: number, check: boolean): Promise<void> {
    if (bytes <= this.lent) return;
    const more = bytes - this.lent;
    this.releases.push(
      await this.source.lendMemory(more, `a live branch of ${this.source.id}`, check),
    );
    this.lent = bytes;
  }

  /** Put the limit back (the copy ended, or the branch failed); never throws. */
  async release(): Promise<void> {
    for (const r of this.releases.splice(0)) await r();
    this.lent = 0;
  }
}
