/**
 * What the idle policy's quiet check sees (docs/idle.md "The default policy"): two children
 * of a busybox snapshot, one idle and one running a busy loop, and every 10 s the share of
 * a core each QEMU's threads ran and waited runnable (schedstat), busiest threads first,
 * with the host's load. An idle guest's threads wait more as the load grows; a busy guest's
 * vCPU thread is runnable all the time. In-process services, like the other benches.
 * Usage: node dist/bench/quiet.js [ROUNDS=6]
 */
import { readdir, readFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { caller, startBenchServices } from './services.js';

const ROUNDS = Number(process.argv[2] ?? 6);

/** Per thread of `pid`: seconds ran and waited runnable so far. */
async function threads(pid: number): Promise<Map<string, [number, number]>> {
  const out = new Map<string, [number, number]>();
  for (const t of await readdir(`/proc/${pid}/task`)) {
    const text = await readFile(`/proc/${pid}/task/${t}/schedstat`, 'utf8').catch(() => '');
    const [run = 0, wait = 0] = text.split(' ').map(Number);
    out.set(t, [run / 1e9, wait / 1e9]);
  }
  return out;
}

/** "ran+waited" shares of a core over `secs`, the three busiest threads, and the sums. */
function shares(a: Map<string, [number, number]>, b: Map<string, [number, number]>, secs: number) {
  const rows: [number, number][] = [];
  for (const [t, [run, wait]] of b) {
    const was = a.get(t);
    if (was) rows.push([(run - was[0]) / secs, (wait - was[1]) / secs]);
  }
  rows.sort((x, y) => y[0] + y[1] - (x[0] + x[1]));
  const ran = rows.reduce((s, r) => s + r[0], 0);
  const waited = rows.reduce((s, r) => s + r[1], 0);
  const top = rows.slice(0, 3).map(([r, w]) => `${r.toFixed(3)}+${w.toFixed(3)}`);
  return `ran ${ran.toFixed(3)}, waited ${waited.toFixed(3)}; threads ${top.join(' ')}`;
}

const env = await startBenchServices(['busybox']);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => void env.close().finally(() => process.exit(130)));
}
try {
  await env.snapshots.create(
    { tag: 'q', memory_mib: 256, image: 'busybox', warm: ['echo warm > /tmp/w'] },
    caller,
  );
  const r = await env.snapshots.fork({ snapshot: 'q', n: 2 }, caller);
  const [idle, busy] = r.sandboxes.map((s) => s.id) as [string, string];
  await env.sandboxes.exec(busy, { argv: ['sh', '-c', '(while :; do :; done) >/dev/null 2>&1 &'] });
  await env.sandboxes.exec(idle, { argv: ['true'] });
  const pids = await Promise.all([idle, busy].map(async (id) => (await env.sandboxes.get(id)).pid));
  console.log(
    `quiet check, shares of a core over 10 s (ran+waited per thread), ${new Date().toISOString()}`,
  );
  for (let i = 0; i < ROUNDS; i++) {
    const a = await Promise.all(pids.map((p) => threads(p as number)));
    const t0 = performance.now();
    await sleep(10_000);
    const b = await Promise.all(pids.map((p) => threads(p as number)));
    const secs = (performance.now() - t0) / 1000;
    console.log(
      `load ${loadavg()[0]?.toFixed(1)} | idle: ${shares(a[0]!, b[0]!, secs)} | busy: ${shares(a[1]!, b[1]!, secs)}`,
    );
  }
} finally {
  await env.close();
}
