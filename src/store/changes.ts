/**
 * Row changes of the store as they are written: what the daemon's event stream
 * (GET /v1/events) is made of. Every state change of a sandbox or snapshot goes through the
 * store, so a listener here misses none, whichever service made it. A listener that throws
 * never fails the write that told it.
 */
import { EventEmitter } from 'node:events';

/** One written row: its table, its key (`*` for a bulk delete) and its state after. */
export interface RowChange {
  table: 'sandboxes' | 'snapshots';
  key: string;
  op: 'insert' | 'update' | 'delete';
  state?: string;
}

export class RowChanges {
  private readonly emitter = new EventEmitter();

  constructor() {
    // One listener per open event stream: many browser tabs are not a leak.
    this.emitter.setMaxListeners(0);
  }

  emit(change: RowChange): void {
    for (const fn of this.emitter.listeners('change')) {
      try {
        (fn as (c: RowChange) => void)(change);
      } catch {
        // A listener's failure is its own (a closed stream); the write stands.
      }
    }
  }

  /** Calls `fn` on every change until the returned function is called. */
  subscribe(fn: (change: RowChange) => void): () => void {
    this.emitter.on('change', fn);
    return () => this.emitter.off('change', fn);
  }
}
