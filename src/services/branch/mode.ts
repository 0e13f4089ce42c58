/**
 * Which capture mode a branch uses: `live` (QEMU forked by ptrace injection, the pause does
 * not grow with memory) where this host can, `copy` elsewhere, unless the daemon or the
 * request names one. The host's ability is probed once, as `forkd doctor` shows it.
 */
import type { BranchModeT } from '../../contract/schemas.js';
import { ForkdError } from '../../errors.js';
import type { LiveProbe } from '../../drivers/vmm.js';
import { vmm } from '../vmm.js';

export class BranchModes {
  private probe: Promise<LiveProbe> | undefined;

  /** `auto` (default) is `live` where the probe passes, `copy` elsewhere. */
  constructor(private readonly setting: BranchModeT | 'auto' = 'auto') {}

  /**
   * The mode of a request: its own, checked, or the daemon's default — `copy` for a
   * source whose QEMU's seccomp filter denies spawn (`pid`: its QEMU).
   */
  async choose(asked: BranchModeT | undefined, pid?: number): Promise<BranchModeT> {
    const spawn = pid === undefined || ((await vmm().confinement.of(pid))?.spawn ?? true);
    const mode = asked ?? (spawn ? await this.default() : 'copy');
    if (mode === 'live') await this.requireLive();
    if (mode === 'live' && !spawn) {
      throw new ForkdError(
        'setup_required',
        'live branch is not available for this sandbox: its QEMU was started with a seccomp filter that denies spawn (a daemon with --branch-mode copy); use mode "copy"',
        { mode: 'live' },
      );
    }
    return mode;
  }

  private async default(): Promise<BranchModeT> {
    if (this.setting !== 'auto') return this.setting;
    return (await this.probeLive()).available ? 'live' : 'copy';
  }

  /** Live branches need ptrace into QEMU. */
  private probeLive(): Promise<LiveProbe> {
    this.probe ??= vmm().probeLive();
    return this.probe;
  }

  private async requireLive(): Promise<void> {
    const probe = await this.probeLive();
    if (!probe.available) {
      throw new ForkdError(
        'setup_required',
        `live branch is not available on this host: ${probe.reason}; use mode "copy" (\`forkd doctor\` explains)`,
        { mode: 'live' },
      );
    }
  }
}
