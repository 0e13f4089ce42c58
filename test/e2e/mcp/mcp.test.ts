/**
 * The MCP server end to end: a real `forkd daemon` (unix socket and TCP, with a token
 * file) and real microVMs, driven by the official MCP SDK's Client over streamable HTTP at
 * /mcp and over stdio (`forkd mcp`). Over each: create → exec → branch with fork 3 → exec
 * in each child → lineage shows them → kill; a bad argument is a tool error with its
 * code. Over HTTP also: a fork with an idle policy pauses itself and a call wakes it, and
 * template_build builds a Dockerfile (progress per step, cached the second time) whose fork
 * has the build's work. With FORKD_MCP_TRANSCRIPT=FILE the calls and answers are written there (docs/mcp.md
 * shows one).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { Sandbox, Snapshot } from '@forkd/sdk';
import { CLI } from '../../helpers/cli.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { freePort } from '../../helpers/ports.js';

const TOKEN = 'mcp-e2e-token-0123456789abcdef';
const TRANSCRIPT = process.env.FORKD_MCP_TRANSCRIPT;
const CALL_MS = 180_000;

let home: TestHome;
let daemon: DaemonProcess | undefined;
let port: number;
const clients: Client[] = [];

before(async () => {
  home = await makeTestHome();
  const tokenFile = join(home.dir, 'tokens');
  await writeFile(tokenFile, `agent:${TOKEN}\n`, { mode: 0o600 });
  port = await freePort();
  daemon = await startDaemon(home, ['--listen', `127.0.0.1:${port}`, '--token-file', tokenFile]);
  if (TRANSCRIPT) await writeFile(TRANSCRIPT, '');
});

after(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  const config = { url: daemon?.url, token: TOKEN };
  try {
    const left = await Sandbox.list(config).catch(() => []);
    await Promise.allSettled(left.map((s) => Sandbox.kill(s.id, config)));
    const snaps = await Snapshot.list(config).catch(() => []);
    await Promise.allSettled(snaps.map((s) => Snapshot.remove(s.tag, { ...config, force: true })));
  } finally {
    await daemon?.stop();
    await home.cleanup();
  }
});

async function connect(transport: Transport): Promise<Client> {
  const client = new Client({ name: 'forkd-e2e', version: '0' });
  await client.connect(transport);
  clients.push(client);
  return client;
}

async function record(line: unknown): Promise<void> {
  if (TRANSCRIPT) await appendFile(TRANSCRIPT, JSON.stringify(line) + '\n');
}

/** Call a tool; the answer's structuredContent (isError left for the caller to check). */
async function call(
  client: Client,
  name: string,
  args: Record<string, unknown>,
): Promise<{ result: CallToolResult; out: Record<string, unknown> }> {
  await record({ call: name, arguments: args });
  const result = (await client.callTool({ name, arguments: args }, undefined, {
    timeout: CALL_MS,
  })) as CallToolResult;
  await record({ isError: result.isError ?? false, structuredContent: result.structuredContent });
  return { result, out: (result.structuredContent ?? {}) as Record<string, unknown> };
}

async function ok<T>(client: Client, name: string, args: Record<string, unknown>): Promise<T> {
  const { result, out } = await call(client, name, args);
  assert.ok(!result.isError, `${name}: ${JSON.stringify(result.content)}`);
  return out as T;
}

interface SandboxOut {
  id: string;
  state: string;
  tier?: string;
}

/** A child forked with an idle policy pauses itself, and the next tool call wakes it. */
async function forkThatPauses(client: Client, tag: string): Promise<void> {
  const { sandboxes } = await ok<{ sandboxes: SandboxOut[] }>(client, 'sandbox_fork', {
    snapshot: tag,
    n: 1,
    idle: { pauseAfterMs: 1000 },
  });
  const [child] = sandboxes as [SandboxOut];
  const tierOf = async () =>
    (await ok<{ sandboxes: SandboxOut[] }>(client, 'sandbox_list', {})).sandboxes.find(
      (s) => s.id === child.id,
    )?.tier;
  const deadline = Date.now() + 15_000; // the idle sweep runs once a second
  let tier = await tierOf();
  while (tier !== 'paused' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    tier = await tierOf();
  }
  assert.equal(tier, 'paused', 'paused about 1 s after it came up');
  const r = await ok<{ stdout: string }>(client, 'sandbox_exec', {
    sandboxId: child.id,
    command: 'cat /tmp/progress',
  });
  assert.equal(r.stdout, 'step-1\n', 'woken by the call');
  await ok(client, 'sandbox_kill', { sandboxId: child.id });
}

/** The scenario, over one client: every step a tool call. */
async function branchAndFanOut(client: Client, tag: string, pauses = false): Promise<void> {
  const { tools } = await client.listTools();
  assert.equal(tools.length, 16);
  const names = tools.map((t) => t.name);
  for (const name of ['sandbox_eval', 'sandbox_run_code', 'sandbox_branch', 'sandbox_fork']) {
    assert.ok(names.includes(name), `${name} is listed`);
  }
  const { sandbox } = await ok<{ sandbox: SandboxOut }>(client, 'sandbox_create', {
    image: 'busybox',
  });
  assert.equal(sandbox.state, 'running');
  const first = await ok<{ exitCode: number }>(client, 'sandbox_exec', {
    sandboxId: sandbox.id,
    command: 'echo step-1 > /tmp/progress',
  });
  assert.equal(first.exitCode, 0);
  const branch = await ok<{ snapshot: { tag: string }; children: { sandboxes: SandboxOut[] } }>(
    client,
    'sandbox_branch',
    { sandboxId: sandbox.id, tag, fork: 3 },
  );
  const children = branch.children.sandboxes;
  assert.equal(children.length, 3);
  for (const [i, child] of children.entries()) {
    const r = await ok<{ exitCode: number; stdout: string }>(client, 'sandbox_exec', {
      sandboxId: child.id,
      command: `cat /tmp/progress; echo child-${i}`,
    });
    assert.equal(r.stdout, `step-1\nchild-${i}\n`, 'each child goes on from the branch');
  }
  const { nodes } = await ok<{ nodes: { id: string; parent: { id: string } | null }[] }>(
    client,
    'lineage_show',
    { tag },
  );
  for (const child of children) {
    assert.equal(nodes.find((n) => n.id === child.id)?.parent?.id, tag);
  }
  if (pauses) await forkThatPauses(client, tag);
  const bad = await call(client, 'sandbox_fork', { snapshot: tag, n: 1000 });
  assert.equal(bad.result.isError, true);
  assert.equal((bad.out.error as { code: string }).code, 'bad_request');
  for (const s of [sandbox, ...children]) {
    await ok(client, 'sandbox_kill', { sandboxId: s.id });
  }
  await ok(client, 'snapshot_remove', { tag });
}

test('over streamable HTTP with a token: branch and fan out', { timeout: 600_000 }, async () => {
  const client = await connect(
    new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${TOKEN}` } },
    }),
  );
  await branchAndFanOut(client, 'mcp-http', true);
});

interface BuiltOut {
  tag: string;
  steps: { status: string }[];
}

/** template_build over one client: progress per step, a fork of the result has the build's
 * work, and the same build again is all cached. */
async function buildAndFork(client: Client, tag: string): Promise<void> {
  const args = {
    tag,
    dockerfile:
      'FROM busybox\nCOPY note.txt /srv/note.txt\nRUN cat /srv/note.txt > /srv/made.txt\n',
    files: { 'note.txt': 'built by mcp\n' },
  };
  const progress: string[] = [];
  const result = (await client.callTool({ name: 'template_build', arguments: args }, undefined, {
    timeout: CALL_MS,
    onprogress: (p) => progress.push(p.message ?? ''),
  })) as CallToolResult;
  assert.ok(!result.isError, JSON.stringify(result.content));
  const built = result.structuredContent as unknown as BuiltOut;
  assert.equal(built.tag, tag);
  assert.deepEqual(
    built.steps.map((s) => s.status).filter((s) => s !== 'config'),
    ['ran', 'ran'],
  );
  assert.ok(
    progress.some((m) => /^step \d+\/\d+: RUN cat/.test(m)),
    `progress per step: ${progress.join('|')}`,
  );
  const { sandboxes } = await ok<{ sandboxes: SandboxOut[] }>(client, 'sandbox_fork', {
    snapshot: tag,
    n: 1,
  });
  const [child] = sandboxes as [SandboxOut];
  const r = await ok<{ stdout: string }>(client, 'sandbox_exec', {
    sandboxId: child.id,
    command: 'cat /srv/made.txt',
  });
  assert.equal(r.stdout, 'built by mcp\n', 'the fork has what the RUN step made');
  await ok(client, 'sandbox_kill', { sandboxId: child.id });
  const again = await ok<BuiltOut>(client, 'template_build', args);
  assert.deepEqual(
    again.steps.map((s) => s.status).filter((s) => s !== 'config'),
    ['cached', 'cached'],
  );
}

test(
  'over streamable HTTP: template_build, then fork the template',
  { timeout: 600_000 },
  async () => {
    const client = await connect(
      new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${TOKEN}` } },
      }),
    );
    await buildAndFork(client, 'mcp-built');
  },
);

test('over stdio (`forkd mcp`): branch and fan out', { timeout: 600_000 }, async () => {
  const client = await connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [CLI, 'mcp'],
      env: { ...home.env, FORKD_URL: daemon?.url ?? '', FORKD_TOKEN: TOKEN },
      stderr: 'pipe',
    }),
  );
  await branchAndFanOut(client, 'mcp-stdio');
  await assertNoLeftovers(home);
});
