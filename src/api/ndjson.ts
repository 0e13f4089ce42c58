/**
 * A Readable of newline-delimited JSON that a producer writes into as events arrive: each
 * line is pushed (and so flushed to the client) at once; writing waits while the client is
 * slow, and reports false once the client has gone, so the producer can stop. Producers
 * that cannot wait (a progress callback) use `send`, which queues without waiting.
 */
import { Readable } from 'node:stream';

export class NdjsonStream extends Readable {
  private wake: (() => void) | undefined;

  override _read(): void {
    this.resume_();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.resume_();
    cb(err);
  }

  private resume_(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  /** Sends one line; resolves false when the stream is gone (client disconnected). */
  async line(value: unknown): Promise<boolean> {
    if (this.destroyed) return false;
    if (!this.push(`${JSON.stringify(value)}\n`)) {
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
    return !this.destroyed;
  }

  /**
   * Queues one line without waiting for a slow client; false when the client is gone. For
   * few, small lines only (progress messages): nothing holds such a producer back.
   */
  send(value: unknown): boolean {
    if (this.destroyed) return false;
    this.push(`${JSON.stringify(value)}\n`);
    return true;
  }

  /** Ends the stream after the lines already written. */
  close(): void {
    if (!this.destroyed) this.push(null);
  }
}
