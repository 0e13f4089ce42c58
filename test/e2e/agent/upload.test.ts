/**
 * The agent's upload path after its speed-ups (one-pass plain strings, table base64, reused
 * buffers): every size and base64 padding round-trips, a chunk written with JSON escapes
 * decodes the same, bad base64 is refused, and a large upload after small ones is intact.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { agentForFile, RawAgentSocket, startAgent } from '../../helpers/agent-process.js';

const { agent, client } = agentForFile();

test('every size and padding round-trips, small and large uploads in turn', async () => {
  for (const size of [0, 1, 2, 3, 4, 5, 192 * 1024 - 1, 192 * 1024 + 1, 3 * 1024 * 1024 + 2, 7]) {
    const data = randomBytes(size);
    const path = join(agent().dir, `up-${size}`);
    assert.equal(await client().writeFile(path, data), size);
    assert.ok(readFileSync(path).equals(data), `${size} bytes`);
  }
});

test('a chunk with JSON escapes decodes like a plain one; bad base64 is refused', async () => {
  const own = await startAgent();
  const raw = await RawAgentSocket.connect(own.socketPath);
  try {
    await raw.sync();
    const path = join(own.dir, 'escaped');
    await raw.send({ type: 'file_write', id: 3, path });
    const b64 = Buffer.from('/??>>?/').toString('base64'); // has '/' and '+'
    // The same base64 with every '/' written as the JSON escape "\/".
    await raw.write(`{"type":"data","id":3,"data":"${b64.replaceAll('/', '\\/')}"}\n`);
    await raw.send({ type: 'eof', id: 3 });
    const [done] = (await raw.until((m) => m.id === 3)).slice(-1);
    assert.deepEqual([done?.type, done?.size], ['result', 7]);
    assert.equal(readFileSync(path, 'utf8'), '/??>>?/');
    await raw.send({ type: 'file_write', id: 4, path: join(own.dir, 'bad') });
    await raw.send({ type: 'data', id: 4, data: 'AAA*' });
    const [bad] = (await raw.until((m) => m.id === 4)).slice(-1);
    assert.deepEqual([bad?.type, bad?.code], ['error', 'bad_request']);
  } finally {
    raw.close();
    await own.stop();
  }
});
