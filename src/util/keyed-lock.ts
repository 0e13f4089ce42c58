/**
 * One holder at a time per key, the others queued in order: for work that must not
 * interleave on one thing (a sandbox's disk chain) but may run alongside work on others.
 * Unlike the concurrency gates, a waiter waits: the holder's work is bounded and short of
 * a failure, and a caller refused instead would only retry.
 */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<void>>();

  /** Wait for `key`; returns its (idempotent) release. */
  async acquire(key: string): Promise<() => void> {
    const before = this.tails.get(key) ?? Promise.resolve();
    let open!: () => void;
    const mine = new Promise<void>((resolve) => (open = resolve));
    const tail = before.then(() => mine);
    this.tails.set(key, tail);
    await before;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (this.tails.get(key) === tail) this.tails.delete(key); // nobody queued behind
      open();
    };
  }

  /** Whether someone holds or waits for `key`. */
  held(key: string): boolean {
    return this.tails.has(key);
  }
}
