/**
 * An unbounded async queue with one consumer: producers push events as the agent sends
 * them, the route iterates. The agent cannot be slowed per request, so buffering here is
 * the only choice; `onAbandon` lets the producer stop the source when the consumer leaves.
 */
export class EventQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private wake: (() => void) | undefined;
  private end: { err?: unknown } | undefined;
  private consumed = false;

  constructor(private readonly onAbandon: () => void = () => undefined) {}

  push(item: T): void {
    if (this.end) return;
    this.items.push(item);
    this.wake?.();
  }

  /** No more items; with `err`, the consumer throws it after the queued items. */
  close(err?: unknown): void {
    if (this.end) return;
    this.end = err === undefined ? {} : { err };
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    if (this.consumed) throw new Error('an event stream can be read only once');
    this.consumed = true;
    try {
      for (;;) {
        if (this.items.length > 0) {
          yield this.items.shift() as T;
        } else if (this.end) {
          if ('err' in this.end) throw this.end.err;
          return;
        } else {
          await new Promise<void>((resolve) => (this.wake = resolve));
          this.wake = undefined;
        }
      }
    } finally {
      if (!this.end) {
        this.close();
        this.onAbandon();
      }
    }
  }
}
