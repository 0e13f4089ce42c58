/**
 * `forkd branch ID`: capture a running sandbox — memory, devices and disk from one instant —
 * into a new snapshot through the daemon while it keeps running; with `--fork N`, start N
 * children of the new snapshot in the same call; `--mode live` pauses the source only to
 * take a copy-on-write view of its memory. Prints the new tag, how long the source was
 * paused and how much written memory was captured, then the children's ids, one per line. A child that fails is named on stderr and forkd exits 1, as `forkd fork` does.
 */
import type { Command } from 'commander';
import { Sandbox, type BranchMode, type BranchResult, type ForkResult } from '@forkd/sdk';
import { sandboxToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { idleOptions, parseIdleFlags, type IdleFlags } from './idle-flags.js';
import { networkOptions, parseEgress, type NetworkFlags } from './network-flags.js';
import { action, printJson } from './output.js';
import { collect, optionalName, parseCount, parseLabels, parseSandboxId, usage } from './parse.js';
import { LIMITS } from './rules.js';
import { snapshotJson } from './snapshots.js';

interface BranchFlags extends DaemonFlags, NetworkFlags, IdleFlags {
  tag?: string;
  fork?: string;
  label: string[];
  /** False with --no-wait (commander's negated option). */
  wait: boolean;
  mode?: string;
}

const MODES: readonly BranchMode[] = ['copy', 'live'];

function parseMode(mode: string | undefined): BranchMode | undefined {
  if (mode === undefined || (MODES as readonly string[]).includes(mode)) {
    return mode as BranchMode | undefined;
  }
  throw usage(`--mode must be copy or live, not "${mode}"`, { flag: '--mode' });
}

export function register(cmd: Command): void {
  daemonOptions(
    idleOptions(networkOptions(cmd, false), "each --fork child's")
      .argument('<id>', 'sandbox id')
      .option('--tag <tag>', "the new snapshot's tag (default: one the daemon picks)")
      .option('--fork <n>', 'also start N children of the new snapshot (0-100)')
      .option('--label <k=v>', 'label of the new snapshot (repeatable)', collect, [])
      .option(
        '--no-wait',
        'return once the source resumed; the snapshot is writing until checksummed',
      )
      .option(
        '--mode <mode>',
        "copy: copy written memory while paused; live: pause only to freeze it copy-on-write (default: the daemon's, live where the host can)",
      )
      .option('--json', 'machine-readable output'),
  ).action(action(branch));
}

async function branch(id: string, flags: BranchFlags): Promise<number> {
  const fork =
    flags.fork === undefined ? undefined : parseCount(flags.fork, '--fork', LIMITS.branchFork);
  const mode = parseMode(flags.mode);
  if (!flags.wait && fork) {
    throw usage('--no-wait cannot --fork: children need the finished snapshot');
  }
  const idle = parseIdleFlags(flags);
  if (idle && !fork) {
    throw usage("--pause-idle-after and --hibernate-idle-after only with --fork (the children's)");
  }
  const result = await Sandbox.branch(parseSandboxId(id), {
    ...clientConfig(flags),
    tag: optionalName(flags.tag, '--tag'),
    fork,
    labels: flags.label.length ? parseLabels(flags.label) : undefined,
    noWait: flags.wait ? undefined : true,
    mode,
    egress: parseEgress(flags),
    idle,
  });
  if (flags.json) printJson(branchJson(result));
  else report(id, result);
  return result.children?.failed.length ? 1 : 0;
}

/** The BranchResult in the REST API's shape. */
function branchJson({ snapshot, mode, pauseMs, capturedBytes, timings, children }: BranchResult) {
  return {
    snapshot: snapshotJson(snapshot.info),
    mode,
    pause_ms: pauseMs,
    captured_bytes: capturedBytes,
    timings,
    ...(children && { children: childrenJson(children) }),
  };
}

function childrenJson({ sandboxes, failed }: ForkResult) {
  return {
    sandboxes: sandboxes.map((s) => sandboxToWire(s.info)),
    failed: failed.map(({ index, error }) => ({ index, error: error.toJSON().error })),
  };
}

const MiB = 1024 * 1024;

/** `branched ID into snapshot TAG: …`, then the children's ids; failures on stderr. */
function report(
  id: string,
  { snapshot, mode, pauseMs, capturedBytes, children }: BranchResult,
): void {
  const copied = capturedBytes ? `, ${(capturedBytes / MiB).toFixed(1)} MiB captured` : '';
  const pause = `paused ${pauseMs.toFixed(1)} ms (${mode})${copied}`;
  const writing =
    snapshot.info.state === 'writing'
      ? `; still writing: \`forkd snapshot info ${snapshot.tag}\` says when it is ready`
      : '';
  process.stdout.write(`branched ${id} into snapshot ${snapshot.tag}: ${pause}${writing}\n`);
  for (const s of children?.sandboxes ?? []) process.stdout.write(`${s.id}\n`);
  for (const { index, error } of children?.failed ?? []) {
    process.stderr.write(`forkd: child ${index}: ${error.message} [${error.code}]\n`);
  }
}
