/**
 * The REST contract, the web UI's feeds: GET /v1/events, /v1/doctor, /v1/bench.
 * Part of src/contract/schemas.ts (the index of every concept's schemas).
 */
import Type, { type Static } from 'typebox';
import { strict } from './build.js';
import { LIMITS } from '../rules.js';

/** One change the event stream reports: a sandbox or snapshot was created, changed or removed. */
export const ChangeEvent = Type.Object(
  {
    kind: Type.Union([Type.Literal('sandbox'), Type.Literal('snapshot')]),
    id: Type.String({
      description:
        'the sandbox id or snapshot tag; `*` when several ended sandboxes were forgotten',
    }),
    op: Type.Union([Type.Literal('created'), Type.Literal('updated'), Type.Literal('removed')]),
    state: Type.Union([Type.String(), Type.Null()], {
      description: 'the state after; null once removed',
    }),
    at: Type.String({ description: 'when the daemon wrote it (ISO 8601)' }),
  },
  {
    $id: 'ChangeEvent',
    description: 'the data of one `change` event of GET /v1/events (server-sent events)',
  },
);
export type ChangeEventT = Static<typeof ChangeEvent>;

export const EventsQuery = Type.Object(
  {
    timeout_s: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: LIMITS.timeoutS.max,
        description: 'end the stream after this many seconds (default: never; 0: at once)',
      }),
    ),
  },
  strict,
);
export type EventsQueryT = Static<typeof EventsQuery>;

export const DoctorCheck = Type.Object({
  id: Type.String(),
  status: Type.Union([Type.Literal('pass'), Type.Literal('warn'), Type.Literal('fail')]),
  summary: Type.String(),
  fix: Type.Optional(Type.String({ description: 'what to do about a warn or fail' })),
});
export const DoctorReport = Type.Object({
  ok: Type.Boolean({ description: 'false when any check fails (no sandbox can boot)' }),
  checks: Type.Array(DoctorCheck),
});
export type DoctorReportT = Static<typeof DoctorReport>;

export const BenchResult = Type.Object({
  name: Type.String({ description: 'the file name under bench/results' }),
  modified_at: Type.String(),
  text: Type.String({ description: 'what the benchmark printed' }),
});
export type BenchResultT = Static<typeof BenchResult>;
export const BenchResults = Type.Object({ results: Type.Array(BenchResult) });
