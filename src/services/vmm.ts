/**
 * The VMM the services run on, given by the wiring (services/index.ts: `buildServices`, and
 * `localServices` for `forkd run` without a daemon) and read by every service that starts,
 * captures or layers a VM. One per process: a daemon runs one kind of VMM. Services import
 * this and the types of drivers/vmm.ts, never a driver's own module (lint keeps it so).
 */
import type { Vmm } from '../drivers/vmm.js';
import { ForkdError } from '../errors.js';

let wired: Vmm | undefined;

/** Set the VMM (the wiring, once at start; the same one again is a no-op). */
export function useVmm(v: Vmm): void {
  wired = v;
}

/** The wired VMM; asking before the wiring ran is a programming error. */
export function vmm(): Vmm {
  if (!wired) {
    throw new ForkdError('internal', 'no VMM driver is wired: build the services first');
  }
  return wired;
}
