/**
 * Property-based fuzzing of the agent protocol from the host side, against the real agent as
 * PID 1 of one booted microVM: random bytes, truncated and oversized lines, requests with
 * random fields, bad base64 in file and stdin data, and resyncs interleaved mid-line. After
 * every case a ping must come back, every line the agent sends must be a JSON message, and
 * a resync must be answered with its nonce. Then the host driver, reconnected, gets random
 * paths and commands and must answer each with a value or a catalog error. Bounded:
 * FORKD_FUZZ_SECONDS (default 8) for the raw frames; FORKD_FUZZ_SEED replays a failure.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { AgentClient } from '../../../src/drivers/agent/client.js';
import { ERROR_CATALOG, isForkdError } from '../../../src/errors.js';
import { MAX_REQUEST_LINE, SYNC_BYTE, encodeSync } from '../../../src/drivers/agent/wire.js';
import {
  bootSandbox,
  destroySandbox,
  type Sandbox,
} from '../../../src/services/sandboxes/sandbox.js';
import { RawAgentSocket } from '../../helpers/agent-process.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { wireVmm } from '../../../src/services/vmm-driver.js';

wireVmm(); // sandboxes booted here without buildServices()

const SECONDS = Number(process.env.FORKD_FUZZ_SECONDS ?? 8);
const SEED_VALUE = process.env.FORKD_FUZZ_SEED ? Number(process.env.FORKD_FUZZ_SEED) : undefined;

let home: TestHome;
let sb: Sandbox;
const tally = { cases: 0, frames: 0, resyncs: 0, replies: 0 };

before(async () => {
  home = await makeTestHome();
  sb = await bootSandbox(home.paths, { image: 'busybox' });
});

after(async () => {
  console.log(
    `agent protocol fuzz: ${tally.cases} cases, ${tally.frames} frames, ${tally.resyncs} resyncs, ${tally.replies} replies`,
  );
  try {
    if (sb) await destroySandbox(sb);
    await assertNoLeftovers(home);
  } finally {
    await home.cleanup();
  }
});

/** A request id no frame uses: the ping that ends a case. */
let nextPing = 1_000_000;

/** One frame: the bytes to write and, for a resync, the nonce whose reply must come. */
interface Frame {
  bytes: Buffer;
  nonce?: number;
}

const b = (s: string): Buffer => Buffer.from(s, 'utf8');
const jsonLine = (v: unknown): Buffer => b(JSON.stringify(v) + '\n');

/** Request types that cannot harm the guest (no remove, no configure, no real exec). */
const SAFE_TYPES = ['ping', 'info', 'stat', 'list', 'file_read', 'signal', 'stdin', 'data', 'eof'];

const garbage = fc.tuple(fc.uint8Array({ maxLength: 600 }), fc.boolean()).map(([bytes, keepFF]) => {
  const buf = Buffer.from(bytes);
  if (!keepFF) for (let i = 0; i < buf.length; i++) if (buf[i] === SYNC_BYTE) buf[i] = 0x20;
  return { bytes: Buffer.concat([buf, b('\n')]) };
});

const randomRequest = fc
  .record({
    type: fc.oneof(fc.constantFrom(...SAFE_TYPES), fc.string({ maxLength: 12 })),
    id: fc.oneof(fc.nat(999_999), fc.integer(), fc.constant(null), fc.string({ maxLength: 4 })),
    fields: fc.dictionary(
      fc.constantFrom('path', 'target', 'signal', 'data', 'eof', 'argv', 'mode', 'x', ''),
      fc.jsonValue({ maxDepth: 3 }),
      { maxKeys: 4 },
    ),
  })
  .map(({ type, id, fields }) => ({ bytes: jsonLine({ ...fields, type, id }) }));

const truncated = fc.tuple(randomRequest, fc.nat()).map(([r, cut]) => ({
  bytes: Buffer.concat([r.bytes.subarray(0, cut % r.bytes.length), b('\n')]),
}));

/** A line past the agent's limit (rare: it costs a second of TCG time). */
const oversized = fc.integer({ min: 1, max: 64 * 1024 }).map((extra) => ({
  bytes: b(`{"type":"ping","id":5,"pad":"${'a'.repeat(MAX_REQUEST_LINE + extra)}"}\n`),
}));

const DATA_B64 = fc.oneof(
  fc.string({ maxLength: 30 }).map((s) => `${s}!`),
  fc.constantFrom('====', 'a', 'ab=c', '@@@@', '\u00ff\u00fe', 'YQ', 'Y Q = =', ''),
  fc.jsonValue({ maxDepth: 1 }),
);

/** A file upload whose data is not base64, then eof; under /tmp/fuzz only. */
const badUpload = fc.tuple(fc.nat(999_999), DATA_B64).map(([n, data]) => {
  const id = 2_000_000 + n;
  return {
    bytes: Buffer.concat([
      jsonLine({ type: 'file_write', id, path: `/tmp/fuzz/${n}`, parents: true }),
      jsonLine({ type: 'data', id, data }),
      jsonLine({ type: 'eof', id }),
    ]),
  };
});

/** `cat` with stdin, fed bad base64, then eof; it ends by itself. */
const badStdin = fc.tuple(fc.nat(999_999), DATA_B64).map(([n, data]) => {
  const id = 3_000_000 + n;
  return {
    bytes: Buffer.concat([
      jsonLine({ type: 'exec', id, argv: ['cat'], stdin: true, timeout_ms: 5000 }),
      jsonLine({ type: 'stdin', id, data }),
      jsonLine({ type: 'stdin', id, eof: true }),
    ]),
  };
});

/** A partial line, then 0xFF and a sync: the agent must drop the partial and answer. */
const resync = fc.tuple(fc.string({ maxLength: 80 }), fc.nat(2 ** 40)).map(([partial, nonce]) => ({
  bytes: Buffer.concat([b(partial.replace(/\n/g, '')), encodeSync(nonce)]),
  nonce,
}));

const frame: fc.Arbitrary<Frame> = fc.oneof(
  { weight: 3, arbitrary: garbage },
  { weight: 4, arbitrary: randomRequest },
  { weight: 2, arbitrary: truncated },
  { weight: 2, arbitrary: badUpload },
  { weight: 1, arbitrary: badStdin },
  { weight: 2, arbitrary: resync },
  { weight: 1, arbitrary: fc.constant(null).chain(() => oversized) },
);

/** Writes the frames, then a ping; reads until its result, checking every resync came back. */
async function runCase(raw: RawAgentSocket, frames: Frame[]): Promise<void> {
  const ping = nextPing++;
  const nonces = new Set(frames.flatMap((f) => (f.nonce === undefined ? [] : [f.nonce])));
  tally.frames += frames.length;
  tally.resyncs += nonces.size;
  for (const f of frames) await raw.write(f.bytes);
  // A frame may end mid-line or mid-upload: a newline closes it before the ping.
  await raw.write(b('\n'));
  await raw.send({ type: 'ping', id: ping });
  const seen = await raw.until(
    (m) => m.id === ping && (m.type === 'result' || m.type === 'error'),
    60_000,
  );
  tally.replies += seen.length;
  const last = seen.at(-1)!;
  assert.equal(last.type, 'result', `the closing ping failed: ${JSON.stringify(last)}`);
  for (const m of seen) if (m.type === 'sync') nonces.delete(m.nonce as number);
  assert.deepEqual([...nonces], [], 'a resync got no reply with its nonce');
}

test(
  'agent protocol fuzz: random frames never stop the agent answering',
  { timeout: (SECONDS + 120) * 1000 },
  async () => {
    sb.agent.close();
    const raw = await RawAgentSocket.connect(sb.vm.files.agent);
    try {
      await raw.sync();
      await fc.assert(
        fc.asyncProperty(fc.array(frame, { minLength: 1, maxLength: 6 }), async (frames) => {
          tally.cases++;
          await runCase(raw, frames);
        }),
        {
          seed: SEED_VALUE,
          numRuns: 100_000,
          interruptAfterTimeLimit: SECONDS * 1000,
          markInterruptAsFailure: false,
          endOnFailure: true,
        },
      );
    } finally {
      raw.close();
    }
    assert.ok(tally.cases >= 5, `only ${tally.cases} cases`);
    sb.agent = await AgentClient.connect(sb.vm.files.agent, { timeoutMs: 10_000 });
    const r = await sb.agent.run({ argv: ['sh', '-c', 'echo alive; cat /proc/1/cmdline'] });
    assert.equal(r.stdout.toString().split('\n')[0], 'alive');
  },
);

const hostileText = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 60 }),
  fc.constantFrom('', '.', '..', '/', '/proc/self/fd/0', '/dev/zero/x', '\u0000', '/tmp/fuzz'),
);

test(
  'host driver fuzz: random paths and commands get a value or a catalog error',
  { timeout: 120_000 },
  async () => {
    const calls = [
      (s: string) => sb.agent.stat(s, { timeoutMs: 10_000 }),
      (s: string) => sb.agent.list(s, { timeoutMs: 10_000 }),
      (s: string) => sb.agent.readFile(`/tmp/fuzz/${s}`, { timeoutMs: 10_000 }),
      (s: string) => sb.agent.run({ argv: [s], cwd: s || undefined, timeoutMs: 10_000 }),
      (s: string) => sb.agent.run({ argv: ['true'], env: { [s]: s }, timeoutMs: 10_000 }),
    ];
    await fc.assert(
      fc.asyncProperty(fc.nat(calls.length - 1), hostileText, async (i, s) => {
        try {
          await calls[i]!(s);
        } catch (e) {
          assert.ok(
            isForkdError(e) && ERROR_CATALOG[e.code],
            `call ${i} on ${JSON.stringify(s)}: ${String(e)}`,
          );
          assert.notEqual(
            e.code,
            'agent_unreachable',
            `call ${i} on ${JSON.stringify(s)}: ${e.message}`,
          );
        }
      }),
      { seed: SEED_VALUE, numRuns: 60, endOnFailure: true },
    );
    await sb.agent.ping();
  },
);
