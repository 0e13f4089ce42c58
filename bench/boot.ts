/**
 * Cold boot benchmark: boot a sandbox from the busybox image until its agent answers,
 * N times (default 10), and report p50/p90 plus the QEMU process's memory per VM.
 * Usage: node dist/bench/boot.js [N] [--memory MiB]
 * It boots in a temp FORKD_HOME linked to the set-up home's kernel and busybox image.
 */
import { readFile } from 'node:fs/promises';
import type { Paths } from '../src/config.js';
import { detectAccel } from '../src/drivers/qemu/accel.js';
import { bootSandbox, destroySandbox } from '../src/services/sandboxes/sandbox.js';
import { makeBenchHome } from './home.js';
import { summary } from './stats.js';
import { wireVmm } from '../src/services/vmm-driver.js';

wireVmm(); // sandboxes booted here without buildServices()

/** Fields (kB) of /proc/PID/smaps_rollup and status that describe a VM's host memory. */
async function memoryOf(pid: number): Promise<Record<string, number>> {
  const text =
    (await readFile(`/proc/${pid}/status`, 'utf8')) +
    (await readFile(`/proc/${pid}/smaps_rollup`, 'utf8'));
  const pick = (key: string) =>
    Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN) / 1024;
  return {
    VmRSS: pick('VmRSS'),
    RssAnon: pick('RssAnon'),
    RssFile: pick('RssFile'),
    Pss: pick('Pss'),
  };
}

async function main(): Promise<void> {
  const n = Number(process.argv[2] ?? 10);
  const memIdx = process.argv.indexOf('--memory');
  const memoryMiB = memIdx > 0 ? Number(process.argv[memIdx + 1]) : 256;
  const home = await makeBenchHome(['busybox']);
  try {
    await measure(home.paths, n, memoryMiB);
  } finally {
    await home.cleanup();
  }
}

async function measure(p: Paths, n: number, memoryMiB: number): Promise<void> {
  const { accel, reason } = await detectAccel();
  console.log(
    `cold boot to agent ready: ${n} boots, busybox image, ${memoryMiB} MiB, accel ${accel} (${reason})`,
  );
  const times: number[] = [];
  const mems: Record<string, number>[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const sb = await bootSandbox(p, { image: 'busybox', memoryMiB });
    times.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 1000)); // let the idle guest settle before reading RSS
    mems.push(await memoryOf(sb.vm.pid));
    await destroySandbox(sb);
    console.log(`  boot ${i + 1}: ${times[i]?.toFixed(0)} ms`);
  }
  console.log(`boot → agent ready: ${summary(times)}`);
  for (const key of ['VmRSS', 'RssAnon', 'RssFile', 'Pss']) {
    console.log(
      `QEMU ${key} per idle VM: ${summary(
        mems.map((m) => m[key] as number),
        'MiB',
      )}`,
    );
  }
}

await main();
