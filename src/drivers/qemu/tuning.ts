/**
 * How lean each QEMU is (docs/idle.md "Leaner children"), set once by the daemon
 * (`--tcg-tb-mib`, `--merge-memory`; FORKD_TCG_TB_MIB, FORKD_MERGE_MEMORY) like the
 * confinement: QEMUs started from then on get it, running ones keep theirs.
 *  - the TCG translation buffer: QEMU reserves 1 GiB and an idle child dirties ~8 MiB of
 *    it; `-accel tcg,tb-size=N` caps it (a full buffer is flushed and code retranslated).
 *  - merging identical pages (KSM): QEMU started through forkd-qemu-exec, which sets
 *    PR_SET_MEMORY_MERGE (and, for `same-layout`, turns off ASLR for it) before exec.
 *  - no transparent huge pages for QEMU's own memory (the launcher's PR_SET_THP_DISABLE):
 *    QEMU asks for them on its translation buffer, so a child that translated 11 MiB of
 *    code held it in 2 MiB pages (-5.8 MiB PSS per idle child without; bench/density.ts).
 *  - one malloc arena (glibc's arena_max=1): QEMU's threads otherwise each dirty an arena
 *    of their own for a few allocations (-1.2 MiB per child, exec latency unchanged).
 *  - no capstone: QEMU loads an empty libcapstone (native/capstone-stub.c, through
 *    LD_LIBRARY_PATH) instead of the disassembler it uses only for debug logs, whose
 *    relocated tables cost every child 1.3 MiB (FORKD_QEMU_DISASSEMBLER=on keeps it).
 *  - no libpmem: an empty one (native/pmem-stub.c) in its place, for persistent-memory RAM
 *    forkd never uses; the real one loads libndctl, libkmod and libcrypto (-0.45 MiB each).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../config.js';
import { ForkdError } from '../../errors.js';

export const MERGE_MODES = ['off', 'on', 'same-layout'] as const;
export type MergeMode = (typeof MERGE_MODES)[number];

export interface VmTuning {
  /** TCG translation buffer in MiB; null: QEMU's default (1 GiB reserved). */
  tbMiB: number | null;
  merge: MergeMode;
  /** Transparent huge pages for QEMU's own memory (off unless FORKD_QEMU_HUGE_PAGES=on). */
  hugePages: boolean;
  /** QEMU's real capstone disassembler (off unless FORKD_QEMU_DISASSEMBLER=on). */
  disassembler: boolean;
}

/**
 * The default cap (bench/density.ts): an idle child translates less than this, so exec and
 * fork are as fast as uncapped (8 MiB thrashed: exec p50 630 ms), and a busy one cannot grow
 * its buffer to 1 GiB.
 */
export const DEFAULT_TB_MIB = 64;

export const QEMU_EXEC_BINARY =
  process.env.FORKD_QEMU_EXEC_BIN ?? join(repoRoot(), 'native', 'build', 'forkd-qemu-exec');

/**
 * Where the libraries QEMU loads before the system's are: libpmem.so.1 (native/pmem-stub.c)
 * and, in `capstone/`, the empty libcapstone.so.4 (native/capstone-stub.c).
 */
export const QEMU_LIBS_DIR = join(repoRoot(), 'native', 'build', 'qemu-libs');

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
    hugePages: env.FORKD_QEMU_HUGE_PAGES === 'on',
    disassembler: env.FORKD_QEMU_DISASSEMBLER === 'on',
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

/**
 * What goes before QEMU's own argv: the launcher with what it sets, or nothing. `jail`:
 * the launcher's jail flags (confine.ts), when QEMU is jailed.
 */
export function launcherPrefix(t: VmTuning = tuning, jail: string[] = []): string[] {
  const flags = [
    ...(t.merge === 'on' ? ['--merge'] : []),
    ...(t.merge === 'same-layout' ? ['--same-layout'] : []),
    ...(t.hugePages ? [] : ['--no-thp']),
    ...jail,
  ];
  return flags.length ? [QEMU_EXEC_BINARY, ...flags, '--'] : [];
}

/** Whether a libraries directory holds the stubs, asked once per directory. */
const libsBuilt = new Map<string, boolean>();

/**
 * The directory of libraries QEMU loads in place of the system's (bound into its jail), or
 * none when not built (QEMU then loads the system's, as before).
 */
export function qemuLibsDir(dir = QEMU_LIBS_DIR): string | null {
  let built = libsBuilt.get(dir);
  if (built === undefined) libsBuilt.set(dir, (built = existsSync(join(dir, 'libpmem.so.1'))));
  return built ? dir : null;
}

/** QEMU's library path before the system's: the stubs, the empty capstone unless asked not. */
export function qemuLibPath(t: VmTuning = tuning, dir = qemuLibsDir()): string[] {
  if (!dir) return [];
  return t.disassembler ? [dir] : [join(dir, 'capstone'), dir];
}

/**
 * QEMU's environment: the daemon's, with glibc's malloc held to one arena and the stubs
 * found first.
 */
export function qemuEnv(
  env: NodeJS.ProcessEnv = process.env,
  libs = qemuLibPath(),
): NodeJS.ProcessEnv {
  const tunables = [env.GLIBC_TUNABLES, 'glibc.malloc.arena_max=1'].filter(Boolean).join(':');
  if (!libs.length) return { ...env, GLIBC_TUNABLES: tunables };
  const path = [...libs, env.LD_LIBRARY_PATH].filter(Boolean).join(':');
  return { ...env, GLIBC_TUNABLES: tunables, LD_LIBRARY_PATH: path };
}
