/**
 * `forkd snapshot create|info|verify|pool|compact|diff`: make a snapshot through the daemon
 * (boot an image, warm it up, capture it; progress on stderr; Ctrl-C aborts and the daemon
 * removes what it had made), show one with its chain, re-check its files, size its pool of
 * pre-started VMMs, flatten a chain into a standalone snapshot, and make a chained one by
 * running a command in a child (`diff`: fork, exec, branch, kill — composed here through
 * the SDK). Listing is `forkd snapshots`, forking `forkd fork`, branching `forkd branch`,
 * removing `forkd rmi`.
 */
import type { Command } from 'commander';
import { Sandbox, Snapshot, type SnapshotInfo, type SnapshotMemoryInfo } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { commandExit, EXIT } from './exit.js';
import { action, formatBytes, printJson, printTable } from './output.js';
import {
  collect,
  parseCount,
  parseCpus,
  parseEnv,
  parseLabels,
  parseMemory,
  parseName,
  usage,
} from './parse.js';
import {
  networkOptions,
  parseEgress,
  parseNetworkMode,
  type NetworkFlags,
} from './network-flags.js';
import { LIMITS } from './rules.js';
import {
  formatLabels,
  formatPool,
  formatPoolBudget,
  shortTime,
  snapshotJson,
  usable,
  whyUnusable,
} from './snapshots.js';

export interface CreateFlags extends DaemonFlags, NetworkFlags {
  image?: string;
  tag?: string;
  memory?: string;
  cpus?: string;
  warm: string[];
  start: string[];
  waitFor?: string;
  waitPort?: string;
  waitTimeout?: string;
  env: string[];
  label: string[];
  context: string[];
  eval: string[];
  onFork: string[];
  user?: string;
  workdir?: string;
}

interface DiffFlags extends DaemonFlags {
  from?: string;
  tag?: string;
  exec?: string;
}

export function register(snapshot: Command): void {
  daemonOptions(
    createFlags(
      snapshot
        .command('create')
        .description('boot an image, warm it up and capture it as a snapshot')
        .option('--image <name>', "image to boot (default: the daemon's)"),
    ),
  ).action(action(create));
  daemonOptions(
    snapshot
      .command('info')
      .description('files and sizes, lineage, pool, children and bootability of a snapshot')
      .argument('<tag>', 'snapshot tag')
      .option('--json', 'machine-readable output'),
  ).action(action(info));
  daemonOptions(
    snapshot
      .command('verify')
      .description("re-check a snapshot's files against its checksums (exit 1 on problems)")
      .argument('<tag>', 'snapshot tag')
      .option('--json', 'machine-readable output'),
  ).action(action(verify));
  daemonOptions(
    snapshot
      .command('pool')
      .description('keep N VMMs pre-started for a snapshot, so forks start faster (0: none)')
      .argument('<tag>', 'snapshot tag')
      .argument('<n>', 'pool size')
      .option(
        '--prewarm',
        'also restore, run once and pause each pool VM: forks cost a resume (the guest has run ~0.1 s past the snapshot)',
      )
      .option('--json', 'machine-readable output'),
  ).action(action(pool));
  daemonOptions(
    snapshot
      .command('compact')
      .description('flatten a chained snapshot (memory and disk) into a standalone one')
      .argument('<tag>', 'snapshot tag')
      .option('--to <tag>', "the standalone snapshot's tag (required)")
      .option('--json', 'machine-readable output'),
  ).action(action(compact));
  daemonOptions(
    snapshot
      .command('diff')
      .description(
        'fork a child of --from, run --exec in it, branch it into --tag, kill it; prints the new tag',
      )
      .option('--from <tag>', 'the snapshot to start from')
      .option('--tag <tag>', "the new snapshot's tag")
      .option('--exec <cmd>', 'the command to run in the child (sh -c); its output goes to stderr')
      .option('--json', 'machine-readable output'),
  ).action(action(diff));
}

/** The flags of a snapshot create (also taken by `forkd from-image`). */
export function createFlags(cmd: Command): Command {
  return networkOptions(cmd)
    .option('--tag <tag>', 'snapshot name: a-z, 0-9, ".", "_", "-"')
    .option('--memory <size>', 'guest memory, e.g. 256M or 1G')
    .option('--cpus <n>', 'virtual CPUs')
    .option('--warm <cmd>', 'run to completion before the capture (repeatable)', collect, [])
    .option('--start <cmd>', 'start and keep running inside the snapshot (repeatable)', collect, [])
    .option('--wait-for <cmd>', 'before the capture, retry this until it exits 0')
    .option('--wait-port <port>', 'before the capture, wait until this guest TCP port listens')
    .option('--wait-timeout <seconds>', 'how long --wait-for / --wait-port may take')
    .option(
      '-e, --env <K=V>',
      'environment of the warm and start commands (repeatable)',
      collect,
      [],
    )
    .option('--label <k=v>', 'label (repeatable)', collect, [])
    .option(
      '--user <name>',
      "forks' commands and files default to this user (default: the image's User)",
    )
    .option(
      '--workdir <dir>',
      "forks' commands start here (default: the image's WorkingDir, else the user's home)",
    )
    .option('--json', 'machine-readable output, no progress')
    .option(
      '--context <name>',
      'start a code context, inherited by forks: "node" is Node, any other name Python (repeatable)',
      collect,
      [],
    )
    .option(
      '--eval <code>',
      'run code in the first context before the capture (repeatable)',
      collect,
      [],
    )
    .option(
      '--on-fork <cmd>',
      'run in every child right after its restore (repeatable)',
      collect,
      [],
    );
}

/** A repeatable flag's values, or undefined when it was not given. */
const nonEmpty = (values: string[]): string[] | undefined => (values.length ? values : undefined);

const optional = <T>(text: string | undefined, parse: (s: string) => T): T | undefined =>
  text === undefined ? undefined : parse(text);

function createOptions(flags: CreateFlags) {
  if (!flags.tag) throw usage('missing --tag TAG (the snapshot name)');
  if (flags.waitFor !== undefined && flags.waitPort !== undefined) {
    throw usage('give --wait-for CMD or --wait-port N, not both');
  }
  return {
    ...clientConfig(flags),
    tag: parseName(flags.tag, '--tag'),
    image: optional(flags.image, (s) => parseName(s, '--image')),
    memoryMib: optional(flags.memory, (s) => parseMemory(s)),
    cpus: optional(flags.cpus, (s) => parseCpus(s)),
    env: parseEnv(flags.env),
    warm: nonEmpty(flags.warm),
    start: nonEmpty(flags.start),
    waitFor: flags.waitFor,
    waitPort: optional(flags.waitPort, (s) => parseCount(s, '--wait-port', LIMITS.waitPort)),
    waitTimeoutMs: optional(
      flags.waitTimeout,
      (s) => parseCount(s, '--wait-timeout', LIMITS.waitTimeoutS) * 1000,
    ),
    labels: parseLabels(flags.label),
    network: parseNetworkMode(flags.network),
    egress: parseEgress(flags),
    contexts: nonEmpty(flags.context.map((c) => parseName(c, '--context'))),
    eval: nonEmpty(flags.eval),
    onFork: nonEmpty(flags.onFork),
    user: flags.user,
    workdir: flags.workdir,
  };
}

/** Calls `fn` on Ctrl-C (or SIGTERM) until the returned function is called. */
function onInterrupt(fn: () => void): () => void {
  process.once('SIGINT', fn);
  process.once('SIGTERM', fn);
  return () => {
    process.off('SIGINT', fn);
    process.off('SIGTERM', fn);
  };
}

export async function create(flags: CreateFlags): Promise<number | void> {
  const opts = createOptions(flags);
  const onProgress = flags.json
    ? undefined
    : (message: string) => void process.stderr.write(`  ${message}\n`);
  // Aborting ends the request; the daemon sees the client leave and cleans up.
  const interrupt = new AbortController();
  const stop = onInterrupt(() => interrupt.abort(new Error('interrupted')));
  try {
    const snap = await Snapshot.create({ ...opts, onProgress, signal: interrupt.signal });
    if (flags.json) printJson(snapshotJson(snap.info));
    else {
      process.stdout.write(`${describe(snap.info)}\n`);
      if (snap.info.pool.size > 0) process.stderr.write(`  ${poolNote(snap.info)}\n`);
    }
  } catch (e) {
    if (!interrupt.signal.aborted) throw e;
    process.stderr.write(
      `forkd: interrupted: the daemon stops making snapshot ${opts.tag} and removes what it had made\n`,
    );
    return EXIT.interrupted;
  } finally {
    stop();
  }
}

/** One line a person reads after a create. */
function describe(s: SnapshotInfo): string {
  const from = s.image ? `image ${s.image}` : s.parent ? `snapshot ${s.parent}` : 'nothing';
  return (
    `snapshot ${s.tag}: ${s.memoryMib} MiB guest, ${formatBytes(s.physicalBytes)} on disk, ` +
    `from ${from}; fork it with \`forkd fork ${s.tag} -n N\``
  );
}

/**
 * The default pool a create starts runs QEMUs nobody asked for: say so, where they are
 * seen and how to turn them off (docs/snapshots.md, "Fast forks by default").
 */
function poolNote(s: SnapshotInfo): string {
  const { size, prewarm } = s.pool;
  const kind = prewarm ? 'pre-warmed ' : '';
  return (
    `started a ${kind}pool of ${size} VM${size === 1 ? '' : 's'} for fast forks (not sandboxes: ` +
    `\`forkd ps --pool\` shows them); \`forkd snapshot pool ${s.tag} 0\` removes it, ` +
    '`forkd daemon --default-pool 0` starts none for new snapshots'
  );
}

async function info(tag: string, flags: DaemonFlags): Promise<void> {
  const s = (await Snapshot.get(parseName(tag, 'the tag'), clientConfig(flags))).info;
  if (flags.json) return printJson(snapshotJson(s));
  const ready = s.state === 'ready';
  printFields([
    ['tag', s.tag],
    ['state', usable(s) ? 'ready, bootable' : whyUnusable(s)],
    ['image', s.image ?? '-'],
    ['parent', s.parent ?? '-'],
    ['branched from', s.sourceSandbox ?? '-'],
    ['depth', s.depth === 0 ? '0 (standalone)' : `${s.depth} (a layer over ${s.parent})`],
    ['ancestors', s.ancestors.join(', ') || '-'],
    ['dependents', s.dependents.join(', ') || '-'],
    ['memory', `${s.memoryMib} MiB, ${s.cpus} cpu${s.cpus === 1 ? '' : 's'}`],
    ['created', shortTime(s.createdAt)],
    ['kernel', s.kernel],
    ['qemu', s.qemu],
    ['labels', formatLabels(s.labels)],
    // An unfinished snapshot has no files, children or pool: zeros would read as empty.
    ...(ready ? publishedFields(s) : []),
  ]);
  if (!ready) return;
  process.stdout.write('\n');
  printTable(
    ['FILE', 'SIZE', 'ON DISK', 'SHA256'],
    s.files.map((f) => [f.name, formatBytes(f.size), formatBytes(f.allocated), f.sha256]),
  );
}

/** What only a published snapshot has: children, pool, sizes. */
function publishedFields(s: SnapshotInfo): [string, string][] {
  return [
    ['children', `${s.childrenAlive} alive`],
    ['pool', formatPool(s.pool)],
    ...(s.pool.budget
      ? [['pool budget', `${formatPoolBudget(s.pool.budget)}, all snapshots`] as [string, string]]
      : []),
    ['size', `${formatBytes(s.logicalBytes)} logical, ${formatBytes(s.physicalBytes)} on disk`],
    ...(s.memory ? [['memory stored', memoryStorage(s.memory)] as [string, string]] : []),
  ];
}

/** How a snapshot's memory is stored: full, or a diff (and its cache for forks). */
function memoryStorage(m: SnapshotMemoryInfo): string {
  const sizes = `${formatBytes(m.logicalBytes)} logical, ${formatBytes(m.storedBytes)} stored`;
  if (m.kind === 'full') return `full: ${sizes}`;
  const cache =
    m.materializedBytes > 0
      ? `${formatBytes(m.materializedBytes)} materialized`
      : 'not materialized';
  return `diff over ${m.parent} (depth ${m.depth}): ${sizes}, ${cache}`;
}

/** `name   value` lines, names aligned. */
function printFields(fields: [string, string][]): void {
  const width = Math.max(...fields.map(([name]) => name.length));
  for (const [name, value] of fields) process.stdout.write(`${name.padEnd(width)}  ${value}\n`);
}

async function verify(tag: string, flags: DaemonFlags): Promise<number> {
  const report = await (
    await Snapshot.get(parseName(tag, 'the tag'), clientConfig(flags))
  ).verify();
  if (flags.json) printJson(report);
  else if (report.ok) process.stdout.write(`snapshot ${tag}: ok\n`);
  else {
    for (const p of report.problems) process.stdout.write(`${p.file}: ${p.problem}\n`);
    process.stderr.write(`forkd: snapshot ${tag} has ${report.problems.length} problem(s)\n`);
  }
  return report.ok ? EXIT.ok : EXIT.failure;
}

async function pool(
  tag: string,
  size: string,
  flags: DaemonFlags & { prewarm?: boolean },
): Promise<void> {
  const n = parseCount(size, 'the pool size', LIMITS.poolSize);
  const snapshot = await Snapshot.get(parseName(tag, 'the tag'), clientConfig(flags));
  const state = await snapshot.setPool(n, { prewarm: Boolean(flags.prewarm) });
  if (flags.json) printJson(state);
  else {
    const kind = state.prewarm ? 'pre-warmed ' : '';
    process.stdout.write(`${kind}pool of ${tag}: ${state.size} (${state.ready} ready now)\n`);
  }
}

async function compact(tag: string, flags: DaemonFlags & { to?: string }): Promise<void> {
  if (!flags.to) throw usage('missing --to NEW (the standalone tag)');
  const to = parseName(flags.to, '--to');
  const flat = await (
    await Snapshot.get(parseName(tag, 'the tag'), clientConfig(flags))
  ).compact(to);
  if (flags.json) printJson(snapshotJson(flat.info));
  else process.stdout.write(`${describe(flat.info)}\n`);
}

function diffOptions(flags: DiffFlags): { from: string; tag: string; exec: string } {
  const { from, tag, exec } = flags;
  if (!from || !tag || !exec) {
    throw usage('snapshot diff needs --from TAG, --tag NEW and --exec CMD');
  }
  return { from: parseName(from, '--from'), tag: parseName(tag, '--tag'), exec };
}

/**
 * Fork one child of --from, run --exec in it, branch it into --tag; the child is killed
 * however that ends (Ctrl-C too). The command's output goes to stderr so that stdout
 * carries only the new tag; a failing command branches nothing and exits with its code.
 */
async function diff(flags: DiffFlags): Promise<number> {
  const { from, tag, exec } = diffOptions(flags);
  const config = clientConfig(flags);
  const child = await Sandbox.create({ ...config, snapshot: from });
  const interrupt = new AbortController();
  const stop = onInterrupt(() => interrupt.abort(new Error('interrupted')));
  try {
    const run = await child.commands.run(exec, {
      signal: interrupt.signal,
      onOutput: (_stream, chunk) => void process.stderr.write(chunk),
    });
    if (run.exitCode !== 0) {
      process.stderr.write(`forkd: \`${exec}\` failed in a child of ${from}: nothing branched\n`);
      return commandExit(run, undefined);
    }
    const { snapshot } = await child.branch({ tag, signal: interrupt.signal });
    if (flags.json) printJson(snapshotJson(snapshot.info));
    else process.stdout.write(`${snapshot.tag}\n`);
  } catch (e) {
    if (!interrupt.signal.aborted) throw e;
    process.stderr.write(`forkd: interrupted: killing the child of ${from}\n`);
    return EXIT.interrupted;
  } finally {
    stop();
    await child.kill().catch(() => undefined);
  }
  return EXIT.ok;
}
