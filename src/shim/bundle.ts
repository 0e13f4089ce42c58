/**
 * What the shim reads of an OCI bundle: the container's process (args, env, cwd, user,
 * terminal), annotations and the network namespace it names (a pod's, made by CNI) from
 * `config.json`, the limits of `linux.resources`, and the same process shape from an Exec's
 * spec. Only these fields mean something in a forkd sandbox; the rest of the runtime spec
 * (mounts, other namespaces, cgroupsPath, seccomp) describes a runc container and is
 * ignored.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CODE, TtrpcError } from './ttrpc.js';

/** The annotation naming the snapshot a task is forked from. */
export const SNAPSHOT_ANNOTATION = 'forkd.dev/snapshot';
/** The annotation listing the guest ports reachable on the pod's addresses (`8080,8888`). */
export const PORTS_ANNOTATION = 'forkd.dev/ports';

/** A process to run in the sandbox, from the OCI spec's `process`. */
export interface ProcessSpec {
  args: string[];
  env: Record<string, string>;
  cwd?: string;
  /** A uid other than root's, as the daemon's exec takes it. */
  user?: string;
  terminal: boolean;
}

export interface BundleSpec {
  process: ProcessSpec;
  annotations: Record<string, string>;
  /** The path of the network namespace to join (`linux.namespaces`), if it names one. */
  netns?: string;
  /** forkd limits of its QEMU from `linux.resources` (memory limit, CPU quota), if set. */
  limits?: { memory?: number; cpu?: number };
}

interface OciResources {
  memory?: { limit?: unknown };
  cpu?: { quota?: unknown; period?: unknown };
}

/**
 * The limits `linux.resources` asks (`ctr run --memory-limit`/`--cpus`, a pod's sandbox
 * resources): the memory limit in bytes and the CPU quota in cores, as forkd's limits of
 * the task's QEMU; undefined when it asks none.
 */
function limitsOf(r: OciResources | undefined): BundleSpec['limits'] {
  const memory = r?.memory?.limit;
  const quota = r?.cpu?.quota;
  const period = r?.cpu?.period;
  const limits: NonNullable<BundleSpec['limits']> = {};
  if (typeof memory === 'number' && memory > 0) limits.memory = memory;
  if (typeof quota === 'number' && typeof period === 'number' && quota > 0 && period > 0) {
    limits.cpu = quota / period;
  }
  return Object.keys(limits).length ? limits : undefined;
}

interface OciProcess {
  args?: unknown;
  env?: unknown;
  cwd?: unknown;
  terminal?: unknown;
  user?: { uid?: unknown };
}

/** The process of an OCI spec's `process` object; `what` names it in errors. */
export function processSpec(p: OciProcess | undefined, what: string): ProcessSpec {
  const args = p?.args;
  if (!Array.isArray(args) || args.length === 0 || !args.every((a) => typeof a === 'string')) {
    throw new TtrpcError(CODE.invalidArgument, `${what} has no process.args: give the command`);
  }
  const env: Record<string, string> = {};
  for (const kv of Array.isArray(p?.env) ? p.env : []) {
    if (typeof kv !== 'string') continue;
    const at = kv.indexOf('=');
    if (at > 0) env[kv.slice(0, at)] = kv.slice(at + 1);
  }
  const uid = p?.user?.uid;
  return {
    args,
    env,
    cwd: typeof p?.cwd === 'string' && p.cwd.startsWith('/') ? p.cwd : undefined,
    user: typeof uid === 'number' && uid !== 0 ? String(uid) : undefined,
    terminal: p?.terminal === true,
  };
}

/** Read `config.json` of the bundle at `dir`. */
export async function readBundle(dir: string): Promise<BundleSpec> {
  const path = join(dir, 'config.json');
  let spec: {
    process?: OciProcess;
    annotations?: unknown;
    linux?: { namespaces?: { type?: unknown; path?: unknown }[]; resources?: OciResources };
  };
  try {
    spec = JSON.parse(await readFile(path, 'utf8')) as typeof spec;
  } catch (e) {
    throw new TtrpcError(
      CODE.invalidArgument,
      `cannot read the bundle's ${path}: ${(e as Error).message}`,
    );
  }
  const annotations: Record<string, string> = {};
  if (spec.annotations && typeof spec.annotations === 'object') {
    for (const [k, v] of Object.entries(spec.annotations)) {
      if (typeof v === 'string') annotations[k] = v;
    }
  }
  const net = spec.linux?.namespaces?.find((n) => n.type === 'network');
  const netns = typeof net?.path === 'string' && net.path.startsWith('/') ? net.path : undefined;
  const limits = limitsOf(spec.linux?.resources);
  return { process: processSpec(spec.process, path), annotations, netns, limits };
}

/** The ports of the `forkd.dev/ports` annotation; a bad one is refused with the reason. */
export function podPorts(annotations: Record<string, string>): number[] {
  const list = (annotations[PORTS_ANNOTATION] ?? '').split(/[\s,]+/).filter(Boolean);
  return list.map((p) => {
    const n = Number(p);
    if (!Number.isInteger(n) || n < 1 || n > 65535) {
      throw new TtrpcError(
        CODE.invalidArgument,
        `${PORTS_ANNOTATION}: "${p}" is not a TCP port (1-65535); list them like "8080,8888"`,
      );
    }
    return n;
  });
}
