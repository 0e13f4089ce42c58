/**
 * The MCP server against the fake services, driven by the official MCP SDK's Client: over
 * streamable HTTP at /mcp (the app on a unix socket and on TCP with a token, as the daemon
 * serves it) and over stdio (`forkd mcp` as a subprocess). Tools are listed with valid
 * schemas and hints; every tool's happy path answers structuredContent that matches its
 * output schema; failures are tool errors with catalog codes; /mcp refuses a missing or
 * wrong token; snapshot create sends progress and stops when cancelled; resources read.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { CallToolResult, Progress } from '@modelcontextprotocol/sdk/types.js';
import { buildApp } from '../../src/api/app.js';
import { Listeners } from '../../src/daemon/servers.js';
import { installMcp } from '../../src/mcp/http.js';
import { CLI } from '../helpers/cli.js';
import { FAKE_PNG } from '../helpers/fake-contexts.js';
import { FakeServices, SEED } from '../helpers/fake-services.js';

const TOKEN = 'mcp-test-token-0123456789';
const OTHER = 'other-token-0123456789abc';
const fake = new FakeServices();
const dir = mkdtempSync(join(tmpdir(), 'forkd-mcp-'));
const socket = join(dir, 'forkd.sock');
const listeners = new Listeners();
let app: FastifyInstance;
let mcpUrl: URL;
const clients: Client[] = [];

before(async () => {
  app = await buildApp(fake.services, {
    tokens: new Map([
      [TOKEN, 'agent'],
      [OTHER, 'other'],
    ]),
    requireAuth: true,
    serverFactory: listeners.serverFactory,
  });
  await installMcp(app, { daemonUrl: `unix:${socket}` });
  const tcp = await listeners.listen(app, socket, { host: '127.0.0.1', port: 0 });
  mcpUrl = new URL(`http://127.0.0.1:${tcp?.port}/mcp`);
});

after(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await listeners.close(app, 2000);
  await rm(dir, { recursive: true, force: true });
});

async function httpClient(token = TOKEN): Promise<Client> {
  const client = new Client({ name: 'forkd-test', version: '0' });
  const transport = new StreamableHTTPClientTransport(mcpUrl, {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  clients.push(client);
  return client;
}

let shared: Promise<Client> | undefined;
const mcp = () => (shared ??= httpClient());

async function call(name: string, args: Record<string, unknown> = {}): Promise<CallToolResult> {
  return (await (await mcp()).callTool({ name, arguments: args })) as CallToolResult;
}

/** A successful call's structuredContent. */
async function ok<T = Record<string, unknown>>(
  name: string,
  args: Record<string, unknown> = {},
): Promise<T> {
  const r = await call(name, args);
  assert.ok(!r.isError, `${name}: ${JSON.stringify(r.content)}`);
  assert.equal(r.content[0]?.type, 'text');
  return r.structuredContent as T;
}

/** A failed call's catalog code (and the text says it too). */
async function code(name: string, args: Record<string, unknown> = {}): Promise<string> {
  const r = await call(name, args);
  assert.equal(r.isError, true, `${name} should fail: ${JSON.stringify(r.structuredContent)}`);
  const error = (r.structuredContent as { error: { code: string; message: string } }).error;
  assert.match(JSON.stringify(r.content), new RegExp(error.code));
  assert.ok(error.message.length > 0);
  return error.code;
}

test('tools/list: every tool, valid JSON schemas, hints an agent can act on', async () => {
  const { tools } = await (await mcp()).listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), [
    'files_list',
    'files_read',
    'files_write',
    'lineage_show',
    'sandbox_branch',
    'sandbox_create',
    'sandbox_eval',
    'sandbox_exec',
    'sandbox_fork',
    'sandbox_kill',
    'sandbox_list',
    'sandbox_run_code',
    'snapshot_create',
    'snapshot_list',
    'snapshot_remove',
    'template_build',
  ]);
  const ajv = new AjvJsonSchemaValidator();
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', t.name);
    assert.equal(t.outputSchema?.type, 'object', t.name);
    ajv.getValidator(t.inputSchema);
    ajv.getValidator(t.outputSchema as never);
    assert.ok((t.description ?? '').length > 60, `${t.name} says enough to act on`);
    assert.equal(typeof t.annotations?.readOnlyHint, 'boolean', t.name);
  }
  const hint = (name: string) => tools.find((t) => t.name === name)?.annotations;
  assert.equal(hint('sandbox_list')?.readOnlyHint, true);
  assert.equal(hint('sandbox_kill')?.destructiveHint, true);
  assert.equal(hint('snapshot_remove')?.destructiveHint, true);
  assert.equal(hint('sandbox_create')?.destructiveHint, false);
  assert.match(tools.find((t) => t.name === 'sandbox_branch')?.description ?? '', /running/);
});

test('/mcp refuses a missing or wrong token with the catalog body', async () => {
  const init = {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: {
      protocolVersion: '2025-06-18',
      capabilities: {},
      clientInfo: { name: 'x', version: '0' },
    },
  };
  const refused: Record<string, string>[] = [
    {},
    { authorization: 'Bearer wrong-token-0123456789' },
  ];
  for (const headers of refused) {
    const res = await fetch(mcpUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        ...headers,
      },
      body: JSON.stringify(init),
    });
    assert.equal(res.status, 401);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'unauthorized');
  }
  await assert.rejects(httpClient('wrong-token-0123456789'), /401|unauthorized/i);
});

test('a session belongs to its token: another token cannot use it', async () => {
  const client = await mcp();
  const session = (client.transport as StreamableHTTPClientTransport).sessionId as string;
  const res = await fetch(mcpUrl, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      authorization: `Bearer ${OTHER}`,
      'mcp-session-id': session,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
  });
  assert.equal(res.status, 404);
  assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'not_found');
});

test('sandbox tools: create, list, exec, files, kill', async () => {
  fake.reset();
  const { sandbox } = await ok<{ sandbox: { id: string; state: string } }>('sandbox_create', {
    image: SEED.image,
    labels: { task: 'mcp' },
  });
  assert.match(sandbox.id, /^sbx-/);
  assert.ok(
    fake.audit.some((a) => a.principal === 'agent'),
    'the REST call behind the tool is audited under the caller token',
  );
  const { sandboxes } = await ok<{ sandboxes: { id: string }[] }>('sandbox_list', {
    label: 'task=mcp',
  });
  assert.deepEqual(
    sandboxes.map((s) => s.id),
    [sandbox.id],
  );
  const run = await ok<{ exitCode: number; stdout: string }>('sandbox_exec', {
    sandboxId: SEED.sandbox,
    command: ['echo', 'hi'],
  });
  assert.deepEqual([run.exitCode, run.stdout], [0, 'hi\n']);
  const failed = await ok<{ exitCode: number }>('sandbox_exec', {
    sandboxId: SEED.sandbox,
    command: 'exit 3',
  });
  assert.equal(failed.exitCode, 3, 'a non-zero exit is a result, not an error');
  assert.deepEqual(
    await ok('files_write', { sandboxId: SEED.sandbox, path: '/etc/note', content: 'héllo' }),
    { path: '/etc/note', size: 6 },
  );
  const read = await ok<{ content: string; size: number }>('files_read', {
    sandboxId: SEED.sandbox,
    path: '/etc/note',
  });
  assert.deepEqual([read.content, read.size], ['héllo', 6]);
  const listing = await ok<{ entries: { name: string }[] }>('files_list', {
    sandboxId: SEED.sandbox,
    path: '/etc',
  });
  assert.ok(listing.entries.some((e) => e.name === 'note'));
  assert.deepEqual(await ok('sandbox_kill', { sandboxId: sandbox.id }), {
    sandboxId: sandbox.id,
    killed: true,
  });
});

test('files_read of a PNG also answers MCP image content', async () => {
  fake.reset();
  const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');
  await ok('files_write', {
    sandboxId: SEED.sandbox,
    path: '/etc/plot.png',
    content: png.toString('base64'),
    encoding: 'base64',
  });
  const r = await call('files_read', { sandboxId: SEED.sandbox, path: '/etc/plot.png' });
  const image = r.content.find((c) => c.type === 'image');
  assert.deepEqual(image, { type: 'image', data: png.toString('base64'), mimeType: 'image/png' });
  assert.equal((r.structuredContent as { encoding: string }).encoding, 'base64');
});

test('sandbox_eval: value, output, the exception as a result, a figure as an image', async () => {
  const value = await ok<{ text: string; executionCount: number }>('sandbox_eval', {
    sandboxId: SEED.sandbox,
    code: 'x + 1',
  });
  assert.equal(value.text, 'x + 1');
  const printed = await ok<{ stdout: string; text: null }>('sandbox_eval', {
    sandboxId: SEED.sandbox,
    code: 'print(hi)',
  });
  assert.deepEqual([printed.stdout, printed.text], ['hi\n', null]);
  const raised = await ok<{ error: { name: string } }>('sandbox_eval', {
    sandboxId: SEED.sandbox,
    code: 'raise ValueError',
  });
  assert.equal(raised.error.name, 'ValueError', "the code's exception is a result");
  const r = await call('sandbox_eval', { sandboxId: SEED.sandbox, code: 'plot()' });
  assert.deepEqual(r.content[1], { type: 'image', data: FAKE_PNG, mimeType: 'image/png' });
  assert.equal(
    await code('sandbox_eval', { sandboxId: SEED.sandbox, code: '1', context: 'nope' }),
    'context_not_found',
  );
});

test('sandbox_run_code: the former name of sandbox_eval still answers the same', async () => {
  const args = { sandboxId: SEED.sandbox, code: 'x + 1' };
  const answer = ({ text, stdout, error }: Record<string, unknown>) => ({ text, stdout, error });
  assert.deepEqual(
    answer(await ok('sandbox_run_code', args)),
    answer(await ok('sandbox_eval', args)),
  );
  const { tools } = await (await mcp()).listTools();
  const named = (n: string) => tools.find((t) => t.name === n);
  assert.deepEqual(named('sandbox_run_code')?.inputSchema, named('sandbox_eval')?.inputSchema);
  assert.match(named('sandbox_run_code')?.description ?? '', /sandbox_eval/);
});

test('snapshot tools: create with progress, list, fork, branch, lineage, remove', async () => {
  fake.reset();
  const seen: Progress[] = [];
  const created = (await (
    await mcp()
  ).callTool(
    { name: 'snapshot_create', arguments: { tag: 'mcp-warm', warm: ['touch /ready'] } },
    undefined,
    {
      onprogress: (p) => seen.push(p),
    },
  )) as CallToolResult;
  assert.ok(!created.isError, JSON.stringify(created.content));
  assert.equal(
    (created.structuredContent as { snapshot: { tag: string } }).snapshot.tag,
    'mcp-warm',
  );
  assert.ok(seen.length >= 3, `progress notifications arrived: ${JSON.stringify(seen)}`);
  assert.ok(seen.some((p) => /warm: touch \/ready/.test(p.message ?? '')));
  assert.deepEqual(
    seen.map((p) => p.progress),
    seen.map((_, i) => i + 1),
    'progress increases',
  );
  const { snapshots } = await ok<{ snapshots: { tag: string }[] }>('snapshot_list');
  assert.ok(snapshots.some((s) => s.tag === 'mcp-warm'));

  const forked = await ok<{ sandboxes: { id: string; snapshot: string }[]; failed: unknown[] }>(
    'sandbox_fork',
    { snapshot: 'mcp-warm', n: 2 },
  );
  assert.equal(forked.sandboxes.length, 2);
  assert.deepEqual(forked.failed, []);
  const branched = await ok<{
    snapshot: { tag: string };
    children: { sandboxes: { id: string }[] };
  }>('sandbox_branch', { sandboxId: forked.sandboxes[0]?.id, tag: 'mcp-step', fork: 3 });
  assert.equal(branched.snapshot.tag, 'mcp-step');
  assert.equal(branched.children.sandboxes.length, 3);
  const { nodes } = await ok<{ nodes: { id: string; parent: { id: string } | null }[] }>(
    'lineage_show',
    { tag: 'mcp-step' },
  );
  for (const child of branched.children.sandboxes) {
    assert.equal(nodes.find((n) => n.id === child.id)?.parent?.id, 'mcp-step');
  }
  assert.equal(await code('snapshot_remove', { tag: 'mcp-step' }), 'snapshot_in_use');
  assert.deepEqual(await ok('snapshot_remove', { tag: 'mcp-step', force: true }), {
    tag: 'mcp-step',
    removed: true,
  });
});

test('idle on sandbox_create, sandbox_fork and sandbox_branch: the children pause as asked', async () => {
  fake.reset();
  type Out = { idle: { pauseAfterMs: number | null; source: string }; tier: string };
  const idle = { pauseAfterMs: 30_000, hibernateAfterMs: null };
  const { sandbox } = await ok<{ sandbox: Out }>('sandbox_create', { idle });
  assert.deepEqual(sandbox.idle, {
    pauseAfterMs: 30_000,
    hibernateAfterMs: null,
    source: 'sandbox',
  });
  assert.equal(sandbox.tier, 'running');
  const forked = await ok<{ sandboxes: Out[] }>('sandbox_fork', {
    snapshot: SEED.snapshot,
    n: 2,
    idle,
  });
  assert.deepEqual(
    forked.sandboxes.map((s) => s.idle.pauseAfterMs),
    [30_000, 30_000],
  );
  const branched = await ok<{ children: { sandboxes: Out[] } }>('sandbox_branch', {
    sandboxId: SEED.sandbox,
    fork: 1,
    idle: { pauseAfterMs: 1500 },
  });
  assert.equal(branched.children.sandboxes[0]?.idle.pauseAfterMs, 2000, 'rounded up to seconds');
  const branches = fake.serviceCalls().filter((c) => c.method === 'branch');
  assert.deepEqual((branches[0]?.args[1] as { idle: unknown }).idle, { pause_after_s: 2 });
  // What the daemon refuses comes back as its error; what the schema refuses, before any call.
  const order = { pauseAfterMs: 60_000, hibernateAfterMs: 60_000 };
  assert.equal(await code('sandbox_create', { idle: order }), 'bad_request');
  assert.equal(
    await code('sandbox_branch', { sandboxId: SEED.sandbox, idle: { pauseAfterMs: 1000 } }),
    'bad_request',
    'idle only with fork',
  );
  const calls = fake.serviceCalls().length;
  assert.equal(await code('sandbox_create', { idle: { pauseAfterMs: -1 } }), 'bad_request');
  assert.equal(
    await code('sandbox_fork', { snapshot: SEED.snapshot, n: 1, idle: { x: 1 } }),
    'bad_request',
  );
  assert.equal(fake.serviceCalls().length, calls);
});

test('failures are tool errors with catalog codes, never crashes', async () => {
  fake.reset();
  const missing = 'sbx-0000000000ff';
  assert.equal(
    await code('sandbox_exec', { sandboxId: missing, command: 'true' }),
    'sandbox_not_found',
  );
  assert.equal(await code('sandbox_kill', { sandboxId: missing }), 'sandbox_not_found');
  assert.equal(
    await code('files_read', { sandboxId: SEED.sandbox, path: '/nope' }),
    'guest_file_not_found',
  );
  assert.equal(await code('sandbox_fork', { snapshot: 'nope', n: 1 }), 'snapshot_not_found');
  assert.equal(
    await code('sandbox_fork', { snapshot: SEED.brokenSnapshot, n: 1 }),
    'snapshot_not_bootable',
  );
  assert.equal(await code('sandbox_create', { image: 'nope' }), 'image_not_found');
  assert.equal(await code('snapshot_create', { tag: SEED.snapshot }), 'name_taken');
  assert.equal(await code('snapshot_create', { tag: 'w2', warm: ['false'] }), 'guest_error');
  assert.equal(await code('lineage_show', { tag: 'nope' }), 'snapshot_not_found');
  assert.equal(await code('snapshot_remove', { tag: 'nope' }), 'snapshot_not_found');
  assert.equal(await code('no_such_tool'), 'not_found');
  // Bad arguments: refused before any request reaches a service, naming the field.
  fake.reset();
  for (const [name, args, field] of [
    ['sandbox_exec', { sandboxId: 'not-an-id', command: 'true' }, 'sandboxId'],
    ['sandbox_fork', { snapshot: SEED.snapshot, n: 0 }, 'n'],
    ['sandbox_fork', { snapshot: SEED.snapshot, n: 1, bogus: 1 }, 'bogus'],
    ['files_read', { sandboxId: SEED.sandbox, path: 'relative' }, 'path'],
    ['sandbox_exec', { sandboxId: SEED.sandbox }, ''],
  ] as const) {
    const r = await call(name, args);
    const error = (r.structuredContent as { error: { code: string; message: string } }).error;
    assert.equal(r.isError, true, name);
    assert.equal(error.code, 'bad_request', `${name} ${JSON.stringify(args)}`);
    if (field) assert.match(error.message, new RegExp(field), error.message);
  }
  assert.deepEqual(fake.serviceCalls(), []);
});

test('cancelling a snapshot create stops it in the daemon', async () => {
  fake.reset();
  const controller = new AbortController();
  let progressed = 0;
  const pending = (await mcp()).callTool(
    { name: 'snapshot_create', arguments: { tag: 'endless', warm: ['forever'] } },
    undefined,
    {
      signal: controller.signal,
      onprogress: () => {
        if (++progressed === 3) controller.abort();
      },
    },
  );
  await assert.rejects(pending, /abort|cancel/i);
  for (let i = 0; i < 200 && !fake.createAborted; i++) await sleep(10);
  assert.equal(fake.createAborted, true, 'the daemon saw the client leave');
  const { snapshots } = await ok<{ snapshots: { tag: string }[] }>('snapshot_list');
  assert.ok(!snapshots.some((s) => s.tag === 'endless'), 'no half-made snapshot');
});

test('resources: sandboxes, lineage and snapshots/{tag}', async () => {
  fake.reset();
  const client = await mcp();
  const { resources } = await client.listResources();
  const uris = resources.map((r) => r.uri);
  for (const uri of [
    'forkd://sandboxes',
    'forkd://lineage',
    `forkd://snapshots/${SEED.snapshot}`,
  ]) {
    assert.ok(uris.includes(uri), uri);
  }
  const { resourceTemplates } = await client.listResourceTemplates();
  assert.deepEqual(
    resourceTemplates.map((t) => t.uriTemplate),
    ['forkd://snapshots/{tag}'],
  );
  const text = async (uri: string) =>
    JSON.parse(((await client.readResource({ uri })).contents[0] as { text: string }).text);
  assert.deepEqual(
    (await text('forkd://sandboxes')).sandboxes.map((s: { id: string }) => s.id),
    [SEED.sandbox],
  );
  assert.ok((await text('forkd://lineage')).nodes.length > 0);
  assert.equal((await text(`forkd://snapshots/${SEED.snapshot}`)).snapshot.tag, SEED.snapshot);
  await assert.rejects(client.readResource({ uri: 'forkd://snapshots/nope' }), /nope/);
});

test('stdio: `forkd mcp` lists the tools and answers calls and bad arguments', async () => {
  fake.reset();
  const client = new Client({ name: 'forkd-test', version: '0' });
  await client.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'mcp'],
      env: { ...process.env, FORKD_URL: `unix:${socket}`, FORKD_TOKEN: TOKEN },
      stderr: 'pipe',
    }),
  );
  clients.push(client);
  assert.equal((await client.listTools()).tools.length, 16);
  const r = (await client.callTool({ name: 'sandbox_list', arguments: {} })) as CallToolResult;
  assert.deepEqual(
    (r.structuredContent as { sandboxes: { id: string }[] }).sandboxes.map((s) => s.id),
    [SEED.sandbox],
  );
  const bad = (await client.callTool({
    name: 'sandbox_kill',
    arguments: { sandboxId: 42 },
  })) as CallToolResult;
  assert.equal(bad.isError, true);
  assert.equal((bad.structuredContent as { error: { code: string } }).error.code, 'bad_request');
});

test('a cancelled branch runs to its end, then its children and snapshot are undone', async () => {
  fake.reset();
  fake.streamDelayMs = 400;
  try {
    const controller = new AbortController();
    const beats: string[] = [];
    const pending = (await mcp()).callTool(
      { name: 'sandbox_branch', arguments: { sandboxId: SEED.sandbox, tag: 'gone', fork: 2 } },
      undefined,
      {
        signal: controller.signal,
        onprogress: (p) => {
          beats.push(p.message ?? '');
          controller.abort();
        },
      },
    );
    await assert.rejects(pending, /abort|cancel/i);
    assert.match(beats[0] ?? '', /branching sbx-/);
    const undone = async () => {
      const { sandboxes } = await ok<{ sandboxes: { state: string }[] }>('sandbox_list');
      const { snapshots } = await ok<{ snapshots: { tag: string }[] }>('snapshot_list');
      const removed = fake
        .serviceCalls()
        .some((c) => c.service === 'snapshots' && c.method === 'remove');
      const running = sandboxes.filter((s) => s.state === 'running');
      return removed && running.length === 1 && !snapshots.some((s) => s.tag === 'gone');
    };
    let clean = false;
    for (let i = 0; i < 100 && !clean; i++) {
      await sleep(50);
      clean = await undone();
    }
    assert.ok(clean, 'the children were killed and the snapshot removed');
    assert.ok(
      fake.serviceCalls().some((c) => c.method === 'remove'),
      'the snapshot was removed',
    );
  } finally {
    fake.streamDelayMs = 5;
  }
});
