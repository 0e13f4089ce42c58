/**
 * A pod under containerd's CRI plugin, as the shim sees it: CRI marks each container's
 * bundle with `io.kubernetes.cri.container-type` (`sandbox` for the pod's own sandbox
 * container, `container` for an app container) and `io.kubernetes.cri.sandbox-id`. One pod
 * is one forkd sandbox: the sandbox container makes it (its "process" is the microVM
 * itself), app containers run as processes inside it.
 */
import type { Sandbox } from '@forkd/sdk';
import type { Running } from './process.js';
import { CODE, TtrpcError } from './ttrpc.js';

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

/** What a pod's VM is to this module: a forkd sandbox it can end and ask about. */
export type Vm = Pick<Sandbox, 'id' | 'kill' | 'refresh'>;

/**
 * The forkd sandbox of a pod (a `ctr` task is a pod of one task): made at once when the pod
 * names a snapshot (or for a `ctr` task), else by its first app container, from that
 * container's image — before it, the pod has no VM, and its sandbox container's "process"
 * (`hold`) stands in for one. Concurrent first containers share one making; a pod stopped
 * while its VM was made kills it once made. The VM itself lives in the daemon, labelled with
 * the pod's id, so a lost shim's `delete` of the pod finds and kills it.
 */
export class PodSandbox<S extends Vm = Sandbox> {
  private making: Promise<S> | undefined;
  private stopped = false;

  constructor(public vm: S | undefined) {}

  /** The VM, made by `make` if the pod has none yet; refused once the pod was stopped. */
  async get(make: () => Promise<S>): Promise<S> {
    if (this.vm) return this.vm;
    this.assertRunning();
    this.making ??= make()
      .then(async (vm) => {
        if (this.stopped) {
          await vm.kill().catch(() => undefined);
          this.assertRunning();
        }
        this.vm = vm;
        return vm;
      })
      .finally(() => (this.making = undefined));
    return this.making;
  }

  private assertRunning(): void {
    if (this.stopped) {
      throw new TtrpcError(
        CODE.failedPrecondition,
        'the pod was stopped before its VM was made: run the pod again (RunPodSandbox)',
      );
    }
  }

  /** End the pod: its VM if it has one, or the one being made once it is. */
  async kill(): Promise<void> {
    this.stopped = true;
    await this.making?.catch(() => undefined);
    await this.vm?.kill();
  }

  /**
   * The pod sandbox container's "process": the microVM. Its pid is the VMM's host pid (0
   * while the pod has no VM; set once its first container made it); a signal ends the VM
   * (and with it every process of the pod), as a signal ends a pause container.
   */
  async hold(): Promise<Running> {
    let end!: (r: { exitCode: number | null; signal: string | null }) => void;
    const ended = new Promise<{ exitCode: number | null; signal: string | null }>(
      (resolve) => (end = resolve),
    );
    return {
      pid: (await this.vm?.refresh())?.pid ?? 0,
      wait: () => ended,
      signal: async (name) => {
        await this.kill();
        end({ exitCode: null, signal: name });
      },
    };
  }
}
