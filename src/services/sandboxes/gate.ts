/**
 * Concurrency caps. Past a cap forkd refuses at once with `capacity` (503 + Retry-After)
 * instead of queueing: a queue hides overload from the caller, who is better placed to
 * back off or go to another host.
 */
import { ForkdError } from '../../errors.js';

/** Retry-After hint of the boot gate: a boot under TCG takes ~3 s. */
const BOOT_RETRY_S = 3;

/**
 * The daemon's boot gate (`--max-booting`, default 4): every cold boot of a guest kernel
 * passes it, a boot from an image (lifecycle.ts) as the wake of a halted sandbox (halt.ts).
 */
export function bootGate(limit = 4): Gate {
  return new Gate('sandboxes booting', limit, BOOT_RETRY_S);
}

export class Gate {
  private inFlight = 0;

  constructor(
    /** What is counted, for the error message ("sandboxes booting"). */
    private readonly what: string,
    readonly limit: number,
    /** A hint for the caller: about how long one unit takes to free up. */
    private readonly retryAfterS: number,
  ) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`${what}: limit ${limit}`);
  }

  get count(): number {
    return this.inFlight;
  }

  /** Take a slot or throw `capacity`; returns the (idempotent) release function. */
  enter(): () => void {
    if (this.inFlight >= this.limit) {
      throw new ForkdError(
        'capacity',
        `too many ${this.what} (limit ${this.limit}); retry in ${this.retryAfterS} s`,
        { retry_after_s: this.retryAfterS, limit: this.limit },
      );
    }
    this.inFlight++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inFlight--;
    };
  }

  /** Hold a slot for the life of `p`. */
  async around<T>(fn: () => Promise<T>): Promise<T> {
    const release = this.enter();
    try {
      return await fn();
    } finally {
      release();
    }
  }
}
