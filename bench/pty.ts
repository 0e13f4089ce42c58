/**
 * Keystroke echo latency of a terminal session (issue 16): a real `forkd daemon`, one busybox
 * sandbox, one `sandbox.pty.create()` session running `cat` (the terminal's line discipline
 * echoes each key, so a key's round trip is: SDK → WebSocket → daemon → agent over
 * virtio-serial → pty → echo → back the same way). One key at a time, each waited for, N
 * times (default 300; no Enter, so cat prints nothing but the echo). Prints p50/p90/p99.
 * Usage: node dist/bench/pty.js [N]
 * It uses a temp FORKD_HOME linked to the set-up home's kernel and busybox image (the
 * kernel's initramfs must carry an agent with terminal sessions).
 */
import { Sandbox } from '@forkd/sdk';
import { detectAccel } from '../src/drivers/qemu/accel.js';
import { startDaemon, stopDaemon } from './daemon.js';
import { makeBenchHome } from './home.js';
import { percentile } from './stats.js';

const N = Number(process.argv[2] ?? 300);
const WARMUP = 20;
const KEYS = 'abcdefghijklmnopqrstuvwxyz';

function line(label: string, samples: number[]): string {
  const f = (n: number) => `${n.toFixed(2)} ms`;
  return `${label}: p50 ${f(percentile(samples, 50))}, p90 ${f(percentile(samples, 90))}, p99 ${f(percentile(samples, 99))}, min ${f(Math.min(...samples))}, max ${f(Math.max(...samples))} (n=${samples.length})`;
}

async function main(): Promise<void> {
  const { accel, reason } = await detectAccel();
  console.log(
    `pty keystroke echo round trip, one key at a time, ${N} timed after ${WARMUP} warm-up, busybox image, 256 MiB, 1 vCPU, accel ${accel} (${reason}), ${new Date().toISOString()}`,
  );
  const home = await makeBenchHome(['busybox']);
  const daemon = await startDaemon(home);
  let sbx: Sandbox | undefined;
  try {
    sbx = await Sandbox.create({ url: daemon.url, image: 'busybox', memoryMib: 256 });
    let waiting: { key: string; done: () => void } | undefined;
    let seen = '';
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      cmd: 'exec cat',
      onData: (d) => {
        seen += Buffer.from(d).toString('latin1');
        if (waiting && seen.includes(waiting.key)) {
          seen = '';
          waiting.done();
        }
      },
    });
    const open = performance.now();
    const samples: number[] = [];
    for (let i = 0; i < WARMUP + N; i++) {
      const key = KEYS[i % KEYS.length] as string;
      const t0 = performance.now();
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no echo of ${key} in 10 s`)), 10_000);
        waiting = { key, done: () => (clearTimeout(timer), resolve()) };
        term.sendInput(key);
      });
      if (i >= WARMUP) samples.push(performance.now() - t0);
    }
    console.log(line('key → echo through the WebSocket PTY (SDK, daemon, agent)', samples));
    console.log(`session of ${((performance.now() - open) / 1000).toFixed(1)} s`);
    await term.kill();
    await term.wait();
  } finally {
    await sbx?.kill().catch(() => {});
    await stopDaemon(daemon);
    await home.cleanup();
  }
}

await main();
