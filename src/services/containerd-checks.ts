/**
 * The doctor's checks of forkd as a containerd runtime (docs/kubernetes.md): containerd
 * installed, `containerd-shim-forkd-v2` on the PATH containerd searches, and containerd's
 * config naming the forkd runtime. Kubernetes is optional: each is a warn at worst.
 */
import { readFile } from 'node:fs/promises';
import { isForkdError } from '../errors.js';
import { run } from '../util/exec.js';
import { onPath } from '../util/on-path.js';

export interface ContainerdOutcome {
  status: 'pass' | 'warn';
  summary: string;
  fix?: string;
}

const SHIM = 'containerd-shim-forkd-v2';
const RUNTIME_TYPE = 'io.containerd.forkd.v2';
const INSTALL = 'run packaging/kubernetes/install.sh of forkd (docs/kubernetes.md)';

/** containerd's config: FORKD_CONTAINERD_CONFIG, else where its packages put it. */
export function containerdConfigPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.FORKD_CONTAINERD_CONFIG || '/etc/containerd/config.toml';
}

export async function checkContainerd(): Promise<ContainerdOutcome> {
  try {
    const { stdout } = await run('containerd', ['--version']);
    const version = /containerd \S+ v?(\S+)/.exec(stdout)?.[1] ?? 'unknown version';
    return { status: 'pass', summary: `containerd ${version}` };
  } catch (e) {
    if (!isForkdError(e, 'setup_required')) throw e;
    return {
      status: 'warn',
      summary: 'containerd is not installed',
      fix: 'apt-get install containerd (only forkd as a Kubernetes runtime needs it)',
    };
  }
}

export async function checkShim(env: NodeJS.ProcessEnv = process.env): Promise<ContainerdOutcome> {
  const path = await onPath(SHIM, env);
  if (path) return { status: 'pass', summary: `${SHIM} at ${path}` };
  return { status: 'warn', summary: `${SHIM} is not on PATH`, fix: INSTALL };
}

export async function checkRuntimeConfig(
  env: NodeJS.ProcessEnv = process.env,
): Promise<ContainerdOutcome> {
  const path = containerdConfigPath(env);
  const text = await readFile(path, 'utf8').catch(() => undefined);
  if (text === undefined) {
    return { status: 'warn', summary: `no containerd config at ${path}`, fix: INSTALL };
  }
  if (!text.includes(RUNTIME_TYPE)) {
    return {
      status: 'warn',
      summary: `${path} does not name the forkd runtime (${RUNTIME_TYPE})`,
      fix: INSTALL,
    };
  }
  const annotations = /pod_annotations\s*=\s*\[[^\]]*forkd\.dev\//.test(text);
  return annotations
    ? { status: 'pass', summary: `${path} names the forkd runtime, with forkd.dev/* annotations` }
    : {
        status: 'warn',
        summary: `${path} names the forkd runtime but passes no forkd.dev/* pod annotations`,
        fix: 'add pod_annotations = ["forkd.dev/*"] to its runtime table, then restart containerd',
      };
}
