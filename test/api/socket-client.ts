/**
 * A client for the API tests that must see the wire as it happens (inject() hands over a
 * whole answer): JSON POSTs over a real TCP socket, NDJSON lines read with the time each
 * arrived, and polling until the daemon side has caught up.
 */
import assert from 'node:assert/strict';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';

/** One NDJSON line and when it arrived (ms since the epoch). */
export interface Line {
  at: number;
  event: { type: string; data?: string; exec_id?: string; [k: string]: unknown };
}

/** Listens on 127.0.0.1 at an ephemeral port; resolves with the port. */
export async function listenLocal(app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  return (app.server.address() as AddressInfo).port;
}

/** POSTs JSON; resolves with the response as soon as its headers arrive. */
export function post(port: number, path: string, body: unknown): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
      },
      resolve,
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/** Reads NDJSON lines with the time each arrived; stops after `limit` lines if given. */
export async function readLines(res: IncomingMessage, limit = Infinity): Promise<Line[]> {
  const lines: Line[] = [];
  let buffered = '';
  for await (const chunk of res) {
    buffered += (chunk as Buffer).toString('utf8');
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      lines.push({ at: Date.now(), event: JSON.parse(buffered.slice(0, nl)) as Line['event'] });
      buffered = buffered.slice(nl + 1);
      if (lines.length >= limit) return lines;
    }
  }
  assert.equal(buffered, '', 'the stream ends with a newline');
  return lines;
}

/** The whole body of a response, as text. */
export async function readText(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** Resolves once `cond()` holds; fails after `ms`. */
export async function until(cond: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(10);
  }
}

/** Asserts that consecutive arrival times are at least `minGapMs` apart. */
export function assertSpread(times: number[], minGapMs: number): void {
  for (let i = 1; i < times.length; i++) {
    assert.ok(
      times[i]! - times[i - 1]! >= minGapMs,
      `line ${i} came with the one before: ${times}`,
    );
  }
}
