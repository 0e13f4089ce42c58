/**
 * How lean each QEMU is (docs/idle.md "Leaner children"), set once by the daemon
 * (`--tcg-tb-mib`, `--merge-memory`; FORKD_TCG_TB_MIB, FORKD_MERGE_MEMORY) like the
 * confinement: QEMUs started from then on get it, running ones keep theirs.
 *  - the TCG translation buffer: QEMU reserves 1 GiB and an idle child dirties ~8 MiB of
 *    it; `-accel tcg,tb-size=N` caps it (a full buffer is flushed and code retranslated).
 *  - merging identical pages (KSM): QEMU started through forkd-qemu-exec, which sets
 *    PR_SET_MEMORY_MERGE (and, for `same-layout`, turns off ASLR for it) before exec.
 */
import { join } from 'node:path';
import { repoRoot } from '../../config.js';
import { ForkdError } from '../../errors.js';

export const MERGE_MODES = ['off', 'on', 'same-layout'] as const;
export type MergeMode = (typeof MERGE_MODES)[number];

export interface VmTuning {
  /** TCG translation buffer in MiB; null: QEMU's default (1 GiB reserved). */
  tbMiB: number | null;
  merge: MergeMode;
}

/**
 * The default cap (bench/density.ts): an idle child translates less than this, so exec and
 * fork are as fast as uncapped (8 MiB thrashed: exec p50 630 ms), and a busy one cannot grow
 * its buffer to 1 GiB.
 */
export const DEFAULT_TB_MIB = 64;

export const QEMU_EXEC_BINARY =
  process.env.FORKD_QEMU_EXEC_BIN ?? join(repoRoot(), 'native', 'build', 'forkd-qemu-exec');

/** `--tcg-tb-mib`: a whole number of MiB from 1 to 1024, or `default` (QEMU's own). */
export function parseTbMiB(text: string, what = '--tcg-tb-mib'): number | null {
  if (text === 'default') return null;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > 1024) {
    throw new ForkdError(
      'bad_request',
      `${what} must be a whole number of MiB from 1 to 1024 or "default", not "${text}"`,
    );
  }
  return n;
}

/** `--merge-memory`: off, on, or same-layout. */
export function parseMerge(text: string, what = '--merge-memory'): MergeMode {
  const mode = MERGE_MODES.find((m) => m === text);
  if (!mode) {
    throw new ForkdError('bad_request', `${what} must be one of ${MERGE_MODES.join(', ')}`);
  }
  return mode;
}

export function tuningFromEnv(env: NodeJS.ProcessEnv = process.env): VmTuning {
  return {
    tbMiB: env.FORKD_TCG_TB_MIB
      ? parseTbMiB(env.FORKD_TCG_TB_MIB, 'FORKD_TCG_TB_MIB')
      : DEFAULT_TB_MIB,
    merge: env.FORKD_MERGE_MEMORY
      ? parseMerge(env.FORKD_MERGE_MEMORY, 'FORKD_MERGE_MEMORY')
      : 'off',
  };
}

let tuning: VmTuning = tuningFromEnv();

/** Set how QEMUs started from now on are tuned. */
export function configureTuning(t: Partial<VmTuning>): void {
  tuning = { ...tuning, ...t };
}

export function vmTuning(): VmTuning {
  return tuning;
}

/** What goes before QEMU's own argv: the merging launcher, or nothing. */
export function launcherPrefix(t: VmTuning = tuning): string[] {
  if (t.merge === 'off') return [];
  return [QEMU_EXEC_BINARY, ...(t.merge === 'same-layout' ? ['--same-layout'] : []), '--'];
}
