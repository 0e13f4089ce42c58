/**
 * Property-based fuzzing of the host's agent driver: a fake agent answers the handshake
 * properly, then answers each request with random frames (garbage, truncated JSON, bad
 * base64, wrong ids and types, stray resync bytes, oversized lines, a dropped socket). Every
 * call must settle in bounded time, either with a value of the right shape or with a catalog
 * error, and nothing may throw out of the driver. The real agent's side is fuzzed in
 * test/e2e/guest/fuzz.test.ts. FORKD_FUZZ_SECONDS (default 8) bounds it, split evenly.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { ERROR_CATALOG, isForkdError } from '../../../src/errors.js';
import { AgentClient } from '../../../src/drivers/agent/client.js';
import { LineReader, SYNC_BYTE, parseLine } from '../../../src/drivers/agent/wire.js';

const SECONDS = Number(process.env.FORKD_FUZZ_SECONDS ?? 8) / 2;
const SEED_VALUE = process.env.FORKD_FUZZ_SEED ? Number(process.env.FORKD_FUZZ_SEED) : undefined;
const CALL_TIMEOUT_MS = 400;

/** One thing the fake agent writes in answer to a request (`id` is that request's). */
type Frame = (id: number, socket: Socket) => void;

const line = (s: Socket, v: unknown) => s.write(JSON.stringify(v) + '\n');
const TYPES = ['result', 'error', 'data', 'stdout', 'stderr', 'started', 'sync', 'exit', 'pty_output'];

const frame: fc.Arbitrary<Frame> = fc.oneof(
  fc.uint8Array({ maxLength: 512 }).map((b) => (_id: number, s: Socket) => void s.write(b)),
  fc
    .tuple(fc.jsonValue({ maxDepth: 3 }), fc.nat(200))
    .map(([v, cut]) => (id: number, s: Socket) => {
      const text = JSON.stringify({ type: 'result', id, v });
      s.write(text.slice(0, Math.min(cut, text.length - 1)) + '\n');
    }),
  fc
    .tuple(fc.constantFrom('data', 'stdout', 'stderr'), fc.string({ maxLength: 40 }))
    .map(([type, data]) => (id: number, s: Socket) => void line(s, { type, id, data: `${data}!*=` })),
  fc
    .record({
      type: fc.oneof(fc.constantFrom(...TYPES), fc.string({ maxLength: 10 })),
      id: fc.oneof(fc.constant('same'), fc.constant(null), fc.integer(), fc.string()),
      extra: fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), {
        maxKeys: 4,
      }),
    })
    .map(({ type, id, extra }) => (reqId: number, s: Socket) =>
      void line(s, { ...extra, type, id: id === 'same' ? reqId : id }),
    ),
  fc
    .tuple(fc.constantFrom(...Object.keys(ERROR_CATALOG), 'not_found', 'io', 'busy', 'x'), fc.jsonValue())
    .map(([code, field]) => (id: number, s: Socket) =>
      void line(s, { type: 'error', id, code, field, message: 'fuzz' }),
    ),
  fc.constant((_id: number, s: Socket) => void s.write(Buffer.from([SYNC_BYTE]))),
  fc.constant((_id: number, s: Socket) =>
    void line(s, { type: 'sync', id: 0, nonce: 1, protocol: 1, agent: 'fuzz' }),
  ),
  fc.constant((_id: number, s: Socket) => void s.write(Buffer.alloc(300 * 1024, 0x61))),
  fc.constant((_id: number, s: Socket) => s.destroy()),
);

/** A fake agent whose answers to the next requests are `script`. */
class FuzzAgent {
  script: Frame[] = [];
  readonly sockets = new Set<Socket>();
  private constructor(
    readonly dir: string,
    readonly server: Server,
  ) {}

  get path(): string {
    return join(this.dir, 'agent.sock');
  }

  static async start(): Promise<FuzzAgent> {
    const dir = await mkdtemp(join(tmpdir(), 'forkd-fuzz-agent-'));
    const agent = new FuzzAgent(dir, createServer());
    agent.server.on('connection', (s) => agent.serve(s));
    await new Promise<void>((resolve) => agent.server.listen(agent.path, resolve));
    return agent;
  }

  private serve(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => {});
    const reader = new LineReader((raw) => {
      let msg;
      try {
        msg = parseLine(raw);
      } catch {
        return;
      }
      if (!msg || socket.destroyed) return;
      if (msg.type === 'sync') {
        socket.write(Buffer.from([SYNC_BYTE]));
        line(socket, { type: 'sync', id: 0, nonce: msg.nonce, protocol: 1, agent: 'fuzz' });
        return;
      }
      if (typeof msg.id !== 'number') return;
      for (const f of this.script) if (!socket.destroyed) f(msg.id, socket);
    });
    socket.on('data', (chunk: Buffer) => reader.push(chunk));
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** The driver calls a fuzz case makes, each bounded by the driver's own timeout. */
const CALLS: Record<string, (c: AgentClient) => Promise<unknown>> = {
  ping: (c) => c.ping({ timeoutMs: CALL_TIMEOUT_MS }),
  info: (c) => c.info({ timeoutMs: CALL_TIMEOUT_MS }),
  stat: (c) => c.stat('/etc', { timeoutMs: CALL_TIMEOUT_MS }),
  list: (c) => c.list('/etc', { timeoutMs: CALL_TIMEOUT_MS }),
  readFile: (c) => c.readFile('/etc/hostname', { timeoutMs: CALL_TIMEOUT_MS }),
  mkdir: (c) => c.mkdir('/tmp/d', { timeoutMs: CALL_TIMEOUT_MS }),
  writeFile: (c) => c.writeFile('/tmp/f', Buffer.from('abc'), { timeoutMs: CALL_TIMEOUT_MS }),
  run: (c) => c.run({ argv: ['true'], timeoutMs: CALL_TIMEOUT_MS, graceMs: 200 }),
};

let agent: FuzzAgent;
const tally = { cases: 0, frames: 0, resolved: 0, rejected: new Map<string, number>() };

before(async () => {
  agent = await FuzzAgent.start();
});
after(async () => {
  await agent.stop();
  const codes = [...tally.rejected].map(([c, n]) => `${c}×${n}`).join(' ');
  console.log(
    `agent driver fuzz: ${tally.cases} calls, ${tally.frames} frames; ${tally.resolved} resolved; rejected ${codes}`,
  );
});

/** Settles within `ms` or fails the case: a hung call is a bug. */
async function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, hang]);
  } finally {
    clearTimeout(timer);
  }
}

test('agent driver fuzz: random replies settle every call with a value or a catalog error', async () => {
  const warnings: string[] = [];
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(...Object.keys(CALLS)),
      fc.array(frame, { minLength: 1, maxLength: 8 }),
      async (call, frames) => {
        agent.script = frames;
        tally.cases++;
        tally.frames += frames.length;
        const client = await AgentClient.connect(agent.path, {
          timeoutMs: 2000,
          onWarning: (m) => warnings.push(m),
        });
        try {
          await bounded(CALLS[call]!(client), CALL_TIMEOUT_MS + 2000, call);
          tally.resolved++;
        } catch (e) {
          assert.ok(isForkdError(e), `${call}: not a catalog error: ${String(e)}`);
          assert.ok(ERROR_CATALOG[e.code], `${call}: unknown code ${e.code}`);
          tally.rejected.set(e.code, (tally.rejected.get(e.code) ?? 0) + 1);
        } finally {
          client.close();
        }
      },
    ),
    {
      seed: SEED_VALUE,
      numRuns: 1_000_000,
      interruptAfterTimeLimit: SECONDS * 1000,
      markInterruptAsFailure: false,
      endOnFailure: true,
    },
  );
  assert.ok(tally.cases > 5, `only ${tally.cases} cases`);
});

test('after the fuzzing a well-behaved agent on the same socket path is served normally', async () => {
  agent.script = [(id, s) => void line(s, { type: 'result', id })];
  const client = await AgentClient.connect(agent.path, { timeoutMs: 2000 });
  try {
    await client.ping();
  } finally {
    client.close();
  }
});

test('regression: an exec whose agent starts it and then goes silent fails with timeout', async () => {
  agent.script = [(id, s) => void line(s, { type: 'started', id, pid: 7 })];
  const client = await AgentClient.connect(agent.path, { timeoutMs: 2000 });
  try {
    const started = Date.now();
    await assert.rejects(
      client.run({ argv: ['sleep', '1000'], timeoutMs: 100, graceMs: 100 }),
      (e) => isForkdError(e, 'timeout') && /hung/.test(e.message),
    );
    assert.ok(Date.now() - started < 2000);
  } finally {
    client.close();
  }
});
