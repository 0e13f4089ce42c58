/**
 * Exec round-trip benchmark (issue: the daemon). Times `true` run to completion, one call
 * at a time, N times (default 500) each way:
 *  - through the daemon: a real `forkd daemon` child process on its unix socket, the SDK's
 *    `sandbox.commands.run(['true'])` (buffered JSON exec), and the same with an `onStdout`
 *    handler (the streaming NDJSON form);
 *  - straight to the agent: a second sandbox booted in this process with `bootSandbox` (no
 *    daemon: QEMU's agent chardev accepts one client, and the daemon holds its sandboxes'),
 *    `agent.run({ argv: ['true'] })` over the virtio-serial socket.
 * The difference of the p50s is what the daemon (HTTP, routing, validation, store, audit,
 * metrics) and the SDK add on top of the agent protocol.
 * Usage: node dist/bench/exec.js [N]
 * It uses a temp FORKD_HOME linked to the set-up home's kernel and busybox image.
 */
import { Sandbox } from '@forkd/sdk';
import { detectAccel } from '../src/drivers/qemu/accel.js';
import {
  bootSandbox,
  destroySandbox,
  type Sandbox as Booted,
} from '../src/services/sandboxes/sandbox.js';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome, type BenchHome } from './home.js';
import { percentile, timeSequential } from './stats.js';
import { wireVmm } from '../src/services/vmm-driver.js';

wireVmm(); // sandboxes booted here without buildServices()

const N = Number(process.argv[2] ?? 500);
/** Calls made before timing starts (connection set-up, JIT, guest page cache). */
const WARMUP = 20;

function line(label: string, samples: number[]): string {
  const f = (n: number) => `${n.toFixed(2)} ms`;
  return `${label}: p50 ${f(percentile(samples, 50))}, p90 ${f(percentile(samples, 90))}, p99 ${f(percentile(samples, 99))}, min ${f(Math.min(...samples))}, max ${f(Math.max(...samples))} (n=${samples.length})`;
}

/** Time `call` N times after WARMUP untimed calls, sequentially. */
async function timeCalls(call: () => Promise<void>): Promise<number[]> {
  for (let i = 0; i < WARMUP; i++) await call();
  return timeSequential(N, call);
}

async function throughDaemon(home: BenchHome): Promise<{ buffered: number[]; streamed: number[] }> {
  const daemon = await startDaemon(home);
  let sandbox: Sandbox | undefined;
  try {
    sandbox = await Sandbox.create({ url: daemon.url, image: 'busybox', memoryMib: 256 });
    const sbx = sandbox;
    const buffered = await timeCalls(async () => {
      const r = await sbx.commands.run(['true']);
      if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
    });
    const streamed = await timeCalls(async () => {
      const r = await sbx.commands.run(['true'], { onStdout: () => {} });
      if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
    });
    return { buffered, streamed };
  } finally {
    await sandbox?.kill().catch(() => {});
    await stopDaemon(daemon);
  }
}

async function direct(home: BenchHome): Promise<number[]> {
  let sb: Booted | undefined;
  try {
    sb = await bootSandbox(home.paths, { image: 'busybox', memoryMiB: 256 });
    const agent = sb.agent;
    return await timeCalls(async () => {
      const r = await agent.run({ argv: ['true'] });
      if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`);
    });
  } finally {
    if (sb) await destroySandbox(sb);
  }
}

async function main(): Promise<void> {
  const { accel, reason } = await detectAccel();
  console.log(
    `exec round trip of \`true\`, sequential, ${N} timed calls after ${WARMUP} warm-up calls, busybox image, 256 MiB, 1 vCPU, accel ${accel} (${reason}), ${new Date().toISOString()}`,
  );
  const home = await makeBenchHome(['busybox']);
  try {
    const viaDaemon = await throughDaemon(home);
    const viaAgent = await direct(home);
    console.log(line('daemon, SDK commands.run (buffered JSON)', viaDaemon.buffered));
    console.log(line('daemon, SDK commands.run + onStdout (NDJSON stream)', viaDaemon.streamed));
    console.log(line('direct, AgentClient.run on the agent socket', viaAgent));
    const d = (p: number, xs: number[]) => (percentile(xs, p) - percentile(viaAgent, p)).toFixed(2);
    console.log(
      `daemon overhead (buffered − direct): p50 +${d(50, viaDaemon.buffered)} ms, p99 +${d(99, viaDaemon.buffered)} ms`,
    );
    console.log(
      `daemon overhead (streamed − direct): p50 +${d(50, viaDaemon.streamed)} ms, p99 +${d(99, viaDaemon.streamed)} ms`,
    );
  } finally {
    await home.cleanup();
  }
}

await main();
