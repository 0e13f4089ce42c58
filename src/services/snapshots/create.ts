/**
 * `snapshot create`: boot a parent from an image, warm it (commands run to completion),
 * start long-lived processes that stay inside the snapshot, wait until it is ready, then
 * capture it and end it. Everything is written under a staging name; any failure or abort
 * removes the parent VM and the staging files, so nothing is left under the tag.
 */
import { rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { CreateSnapshotT } from '../../contract/schemas.js';
import type { Paths } from '../../config.js';
import type { AgentClient } from '../../drivers/agent/client.js';
import { ForkdError } from '../../errors.js';
import { locateGuest } from '../guest.js';
import { DEFAULT_IMAGE, getImage, imageExecDefaults, type ExecDefaults } from '../images/index.js';
import {
  bootSandbox,
  destroySandbox,
  newSandboxId,
  resolveResources,
  type Sandbox,
} from '../sandboxes/sandbox.js';
import type { Limiter, Placement } from '../limits.js';
import { mergeEgress, OPEN_EGRESS, type Egress } from '../network/policy.js';
import type { NetworkManager } from '../network/service.js';
import { warmContexts } from './hooks.js';
import { publishSnapshot, SNAPSHOT_FILES, stagingDir, type SnapshotManifest } from './files.js';
import { asDiskFull } from '../disk-full.js';
import type { BootKey } from './boot.js';
import { vmm } from '../vmm.js';

export interface CreateContext {
  paths: Paths;
  /** The parent's NIC and policy (without it the parent has network `none`). */
  network?: NetworkManager;
  /** The parent's QEMU runs in a cgroup of its own with the daemon's default limits. */
  limiter?: Limiter;
  qemuVersion: string;
  onProgress: (message: string) => void;
  signal?: AbortSignal;
  /** A boot snapshot's key (boot.ts), recorded in its manifest. */
  boot?: BootKey;
}

const DEFAULT_WAIT_S = 120;
const OUTPUT_TAIL = 2000;

/** Make and publish a snapshot; returns its manifest. */
export async function createSnapshot(
  req: CreateSnapshotT,
  ctx: CreateContext,
): Promise<{ manifest: SnapshotManifest; pauseMs: number; parent: string }> {
  const image = req.image ?? DEFAULT_IMAGE;
  const staging = await stagingDir(ctx.paths, req.tag);
  let sb: Sandbox | undefined;
  const id = newSandboxId();
  const mode = ctx.network ? (req.network ?? 'nat') : 'none';
  try {
    ctx.onProgress(`booting a parent from image ${image} (network ${mode})`);
    const egress: Egress | undefined =
      ctx.network && mode === 'nat' ? mergeEgress(OPEN_EGRESS, req.egress) : undefined;
    const net = await ctx.network?.lease(id, mode, egress);
    const res = resolveResources({ memoryMiB: req.memory_mib, cpus: req.cpus });
    sb = await bootSandbox(ctx.paths, {
      id,
      net,
      placement: ctx.limiter && (await parentPlacement(ctx.limiter, res)),
      image,
      memoryMiB: req.memory_mib,
      cpus: req.cpus,
      env: req.env,
      signal: ctx.signal,
    });
    await warm(sb.agent, req, ctx);
    ctx.onProgress('capturing memory, devices and disk');
    ctx.signal?.throwIfAborted();
    await sb.agent.flush(); // no fork inherits the parent's pending writeback (docs/idle.md)
    sb.agent.close(); // children open their own agent session (0xFF + sync)
    const cap = await vmm().capture(
      sb.vm,
      {
        memory: join(staging, SNAPSHOT_FILES.memory),
        deviceState: join(staging, SNAPSHOT_FILES.vmstate),
      },
      { resume: false },
    );
    const { bytes } = await cap.pages;
    await sb.vm.kill();
    await sb.limiter?.remove(sb.id);
    await rename(join(sb.dir, 'overlay.qcow2'), join(staging, SNAPSHOT_FILES.disk));
    ctx.onProgress(`captured ${(bytes / 1048576).toFixed(0)} MiB of written memory; checksumming`);
    const manifest = await publishSnapshot(ctx.paths, staging, {
      tag: req.tag,
      image,
      parent: null,
      source_sandbox: sb.id,
      kernel: (await locateGuest(ctx.paths)).kernelVersion,
      qemu: ctx.qemuVersion,
      accel: sb.vm.spec.accel,
      memory_mib: sb.vm.spec.memoryMiB,
      cpus: sb.vm.spec.cpus,
      device_set: sb.vm.spec.deviceSet ?? 1,
      created_at: new Date().toISOString(),
      labels: req.labels ?? {},
      network: mode,
      ...(egress ? { egress } : {}),
      ...(req.on_fork?.length ? { on_fork: req.on_fork } : {}),
      ...(ctx.boot ? { boot: ctx.boot } : {}),
      ...(await childDefaults(ctx.paths, image, req)),
    });
    await ctx.network?.release(id);
    await rm(sb.dir, { recursive: true, force: true });
    return { manifest, pauseMs: cap.pauseMs, parent: sb.id };
  } catch (e) {
    if (sb) await destroySandbox(sb).catch(() => undefined);
    await ctx.network?.release(id);
    await rm(staging, { recursive: true, force: true });
    throw await asDiskFull(e, ctx.paths.snapshots, `snapshot create of ${req.tag}`);
  }
}

/**
 * The user and working directory its children's commands get when they name none, as a
 * template records them: `--user`/`--workdir`, else the image config's User and WorkingDir.
 */
async function childDefaults(
  p: Paths,
  image: string,
  req: CreateSnapshotT,
): Promise<{ user?: string; workdir?: string }> {
  const fromImage = await getImage(p, image).then(imageExecDefaults, () => ({}) as ExecDefaults);
  const user = req.user ?? fromImage.user;
  const workdir = req.workdir ?? fromImage.cwd;
  return { ...(user ? { user } : {}), ...(workdir ? { workdir } : {}) };
}

/**
 * The parent VM's cgroup: the daemon's default memory and pids limits, but no CPU quota.
 * Booted under a quota, the captured guest kept a clock that lagged the host's by seconds
 * in its children (snapshots/fork.test's clock check failed in two of two runs with it,
 * passed without): its kernel's timekeeping must not be throttled while it starts.
 */
async function parentPlacement(
  limiter: Limiter,
  res: { memoryMiB: number; cpus: number },
): Promise<Placement> {
  return { limiter, limits: { ...(await limiter.resolve(undefined, res)), cpu: null } };
}

/** Warm-up commands, long-lived starts, then the readiness check. */
async function warm(agent: AgentClient, req: CreateSnapshotT, ctx: CreateContext): Promise<void> {
  for (const cmd of req.warm ?? []) {
    ctx.onProgress(`warm: ${cmd}`);
    await mustSucceed(agent, cmd, 'warm-up command', ctx.signal);
  }
  for (const [i, cmd] of (req.start ?? []).entries()) {
    ctx.onProgress(`start: ${cmd}`);
    // Detached from the agent's exec (own output file, no pipes), so it keeps running in
    // the parent and therefore in every fork.
    const detached = `(${cmd}) </dev/null >/tmp/forkd-start-${i}.log 2>&1 &`;
    await mustSucceed(agent, detached, 'start command', ctx.signal);
  }
  await checkDefaults(agent, req, ctx.signal);
  await warmContexts(agent, req, ctx.onProgress);
  const deadline = Date.now() + (req.wait_timeout_s ?? DEFAULT_WAIT_S) * 1000;
  if (req.wait_for) await waitUntil(agent, req.wait_for, deadline, ctx);
  if (req.wait_port) await waitUntil(agent, portCheck(req.wait_port), deadline, ctx);
}

/** `--user` and `--workdir` must exist once warmed (a warm-up command may create them). */
async function checkDefaults(agent: AgentClient, req: CreateSnapshotT, signal?: AbortSignal) {
  const checks: [string | undefined, string[], string][] = [
    [
      req.user,
      ['id', '-u', req.user ?? ''],
      'no such user in the image (add it in a --warm command)',
    ],
    [
      req.workdir,
      ['test', '-d', req.workdir ?? ''],
      'no such directory in the image (make it in a --warm command)',
    ],
  ];
  for (const [value, argv, reason] of checks) {
    if (value === undefined) continue;
    const r = await agent.run({ argv, signal });
    if (r.exitCode !== 0) {
      const field = argv[0] === 'id' ? 'user' : 'workdir';
      throw new ForkdError('bad_request', `${field} ${value}: ${reason}`, { field, reason });
    }
  }
}

/** A shell test that a guest TCP port listens (state 0A in /proc/net/tcp{,6}). */
export function portCheck(port: number): string {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  return `grep -q ':${hex} [0-9A-F:]* 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null`;
}

async function mustSucceed(
  agent: AgentClient,
  cmd: string,
  what: string,
  signal?: AbortSignal,
): Promise<void> {
  const r = await agent.run({ argv: ['sh', '-c', cmd], signal });
  if (r.exitCode === 0) return;
  const output = (r.stdout.toString() + r.stderr.toString()).slice(-OUTPUT_TAIL);
  throw new ForkdError(
    'bad_request',
    `${what} failed (${r.exitCode === null ? r.signal : `exit ${r.exitCode}`}): ${cmd}\n${output}`,
    { command: cmd, exit_code: r.exitCode, output },
  );
}

async function waitUntil(
  agent: AgentClient,
  check: string,
  deadline: number,
  ctx: CreateContext,
): Promise<void> {
  ctx.onProgress(`waiting until ready: ${check}`);
  for (;;) {
    ctx.signal?.throwIfAborted();
    const r = await agent.run({ argv: ['sh', '-c', check], signal: ctx.signal });
    if (r.exitCode === 0) return;
    if (Date.now() > deadline) {
      throw new ForkdError(
        'timeout',
        `the parent did not become ready in time: ${check} kept failing`,
        {
          check,
        },
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
