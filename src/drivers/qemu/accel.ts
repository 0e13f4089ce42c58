/**
 * Which accelerator QEMU gets: KVM when it can really run a guest, TCG otherwise.
 * A /dev/kvm that opens is not enough: nested hosts expose one whose vCPUs cannot run
 * (no vmx/svm in the host's CPU flags; QEMU then asserts on MSR writes or hangs).
 */
import { access, readFile } from 'node:fs/promises';
import { constants } from 'node:fs';
import { accelSetting } from '../../config.js';

import type { AccelChoice } from '../vmm.js';

export type { AccelChoice } from '../vmm.js';

/** Decide the accelerator per FORKD_ACCEL (kvm|tcg|auto) and what the host offers. */
export async function detectAccel(env: NodeJS.ProcessEnv = process.env): Promise<AccelChoice> {
  const setting = accelSetting(env);
  if (setting === 'kvm') return { accel: 'kvm', reason: 'FORKD_ACCEL=kvm' };
  if (setting === 'tcg') return { accel: 'tcg', reason: 'FORKD_ACCEL=tcg' };
  try {
    await access('/dev/kvm', constants.R_OK | constants.W_OK);
  } catch {
    return { accel: 'tcg', reason: '/dev/kvm is missing or not accessible' };
  }
  const cpuinfo = await readFile('/proc/cpuinfo', 'utf8').catch(() => '');
  if (!/^flags\s*:.*\b(vmx|svm)\b/m.test(cpuinfo)) {
    return {
      accel: 'tcg',
      reason: '/dev/kvm exists but the CPU flags lack vmx/svm (nested KVM that cannot run vCPUs)',
    };
  }
  return { accel: 'kvm', reason: '/dev/kvm is usable' };
}

/** The host TSC frequency in kHz, for the guest's `tsc_early_khz=` (TCG boot-hang fix). */
export async function hostTscKhz(): Promise<number | undefined> {
  const cpuinfo = await readFile('/proc/cpuinfo', 'utf8').catch(() => '');
  const m = /^cpu MHz\s*:\s*([\d.]+)/m.exec(cpuinfo);
  return m ? Math.round(Number(m[1]) * 1000) : undefined;
}
