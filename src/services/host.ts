/**
 * Host facts for /version and /metrics: the QEMU version (asked once: it cannot change
 * under a running daemon without a restart mattering anyway), the accelerator, and the
 * sandbox count per state straight from the store.
 */
import type { BenchResultT, DoctorReportT } from '../contract/schemas.js';
import type { HostInfo, SandboxUsageT } from './contracts.js';
import { run } from '../util/exec.js';
import { vmm } from './vmm.js';

/** "QEMU emulator version 7.2.22 (Debian …)" → "7.2.22"; the first line when unparseable. */
export function parseQemuVersion(output: string): string {
  const m = /version\s+(\d+(?:\.\d+)+)/i.exec(output);
  return m?.[1] ?? output.split('\n')[0]?.trim() ?? 'unknown';
}

export class Host implements HostInfo {
  private version: Promise<string> | undefined;
  private accelerator: Promise<'kvm' | 'tcg'> | undefined;

  constructor(
    private readonly counts: () => Record<string, number>,
    private readonly usage: () => Promise<SandboxUsageT[]> = async () => [],
    private readonly reports: {
      doctor?: () => Promise<DoctorReportT>;
      bench?: () => Promise<BenchResultT[]>;
    } = {},
  ) {}

  doctor(): Promise<DoctorReportT> {
    return this.reports.doctor?.() ?? Promise.resolve({ ok: true, checks: [] });
  }

  benchResults(): Promise<BenchResultT[]> {
    return this.reports.bench?.() ?? Promise.resolve([]);
  }

  qemuVersion(): Promise<string> {
    this.version ??= run(vmm().binary, ['--version']).then(
      (r) => parseQemuVersion(r.stdout),
      () => 'unknown',
    );
    return this.version;
  }

  accel(): Promise<'kvm' | 'tcg'> {
    this.accelerator ??= vmm()
      .accel()
      .then((a) => a.accel);
    return this.accelerator;
  }

  sandboxCounts(): Record<string, number> {
    return this.counts();
  }

  sandboxUsage(): Promise<SandboxUsageT[]> {
    return this.usage();
  }
}
