/**
 * A pod under containerd's CRI plugin, as the shim sees it: CRI marks each container's
 * bundle with `io.kubernetes.cri.container-type` (`sandbox` for the pod's own sandbox
 * container, `container` for an app container) and `io.kubernetes.cri.sandbox-id`. One pod
 * is one forkd sandbox: the sandbox container makes it (its "process" is the microVM
 * itself), app containers run as processes inside it.
 */
import type { Sandbox } from '@forkd/sdk';
import type { Running } from './process.js';

export const CRI_ANNOTATION = {
  containerType: 'io.kubernetes.cri.container-type',
  sandboxId: 'io.kubernetes.cri.sandbox-id',
} as const;

/** What a task is: a plain task (ctr), a pod's sandbox container, or a pod's app container. */
export type Role =
  { kind: 'task' } | { kind: 'pod'; pod: string } | { kind: 'container'; pod: string };

/** The role of task `id` from its bundle's annotations. */
export function roleOf(annotations: Record<string, string>, id: string): Role {
  const pod = annotations[CRI_ANNOTATION.sandboxId];
  const type = annotations[CRI_ANNOTATION.containerType];
  if (type === 'sandbox') return { kind: 'pod', pod: pod || id };
  if (type === 'container' && pod) return { kind: 'container', pod };
  return { kind: 'task' };
}

/**
 * The pod sandbox container's "process": the microVM. Its pid is the VMM's host pid; a
 * signal ends the VM (and with it every process of the pod), as a signal ends a pause
 * container.
 */
export async function holdSandbox(sandbox: Sandbox): Promise<Running> {
  let end!: (r: { exitCode: number | null; signal: string | null }) => void;
  const ended = new Promise<{ exitCode: number | null; signal: string | null }>(
    (resolve) => (end = resolve),
  );
  const info = await sandbox.refresh();
  return {
    pid: info.pid ?? 0,
    wait: () => ended,
    signal: async (name) => {
      await sandbox.kill();
      end({ exitCode: null, signal: name });
    },
  };
}
