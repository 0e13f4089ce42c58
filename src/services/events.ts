/**
 * The change feed behind GET /v1/events: every sandbox and snapshot row the store writes,
 * in the contract's words (created / updated / removed). The store is where every service's
 * state change lands, so subscribing there reports them all without each service having
 * to remember to tell.
 */
import type { ChangeEventT } from '../contract/schemas.js';
import type { RowChange, RowChanges } from '../store/changes.js';
import type { EventService } from './contracts.js';

const OP: Record<RowChange['op'], ChangeEventT['op']> = {
  insert: 'created',
  update: 'updated',
  delete: 'removed',
};

/** A store row change as the event stream reports it. */
export function changeEvent(change: RowChange, at = new Date()): ChangeEventT {
  return {
    kind: change.table === 'sandboxes' ? 'sandbox' : 'snapshot',
    id: change.key,
    op: OP[change.op],
    state: change.op === 'delete' ? null : (change.state ?? null),
    at: at.toISOString(),
  };
}

export class EventFeed implements EventService {
  constructor(private readonly changes: RowChanges) {}

  subscribe(fn: (event: ChangeEventT) => void): () => void {
    return this.changes.subscribe((change) => fn(changeEvent(change)));
  }
}
