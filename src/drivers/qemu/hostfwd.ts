/**
 * Port forwards into a guest through QEMU's user networking (HMP `hostfwd_add`): slirp
 * listens on an address of the namespace QEMU runs in and connects to the guest's port.
 * Added at run time, so a fork's forwards are its own (slirp does not save them).
 */
import { ForkdError } from '../../errors.js';
import { monitor, type Vm } from './vm.js';

function rule(bind: string, hostPort: number, guestPort?: number): string {
  return `tcp:${bind}:${hostPort}${guestPort === undefined ? '' : `-:${guestPort}`}`;
}

async function hmp(vm: Vm, command: string): Promise<string> {
  return monitor(vm).execute<string>('human-monitor-command', { 'command-line': command });
}

/** Listen on `bind:hostPort` in QEMU's namespace and forward to the guest's `guestPort`. */
export async function addHostForward(
  vm: Vm,
  bind: string,
  hostPort: number,
  guestPort: number,
): Promise<void> {
  const out = await hmp(vm, `hostfwd_add net0 ${rule(bind, hostPort, guestPort)}`);
  if (out.trim()) {
    throw new ForkdError('internal', `QEMU refused the port forward: ${out.trim()}`, {
      port: guestPort,
    });
  }
}

/** Remove a forward added by {@link addHostForward} (no error if it is gone). */
export async function removeHostForward(vm: Vm, bind: string, hostPort: number): Promise<void> {
  await hmp(vm, `hostfwd_remove net0 ${rule(bind, hostPort)}`).catch(() => undefined);
}
