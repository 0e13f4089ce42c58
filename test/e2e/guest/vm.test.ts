/**
 * The agent as PID 1 of a real microVM (TCG here): concurrency, timeouts, crashes, binary
 * files, a host that disconnects mid-exec, and malformed protocol input sent straight to
 * the VM's agent socket. One VM serves the whole file; it is torn down even on failure.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { AgentClient } from '../../../src/drivers/agent/client.js';
import {
  bootSandbox,
  destroySandbox,
  type Sandbox,
} from '../../../src/services/sandboxes/sandbox.js';
import { RawAgentSocket } from '../../helpers/agent-process.js';
import { assertNoLeftovers, makeTestHome, type TestHome } from '../../helpers/home.js';
import { wireVmm } from '../../../src/services/vmm-driver.js';

wireVmm(); // sandboxes booted here without buildServices()

let home: TestHome;
let sb: Sandbox;

before(async () => {
  home = await makeTestHome();
  sb = await bootSandbox(home.paths, { image: 'busybox' });
});

after(async () => {
  try {
    if (sb) await destroySandbox(sb);
    await assertNoLeftovers(home);
  } finally {
    await home.cleanup();
  }
});

const sh = (script: string, timeoutMs?: number) =>
  sb.agent.run({ argv: ['sh', '-c', script], timeoutMs });

test('the guest runs the image as root with the agent as PID 1', async () => {
  const r = await sh('cat /proc/1/cmdline; echo; id -u; hostname; cat /etc/os-release | head -1');
  const [cmdline, uid, hostname] = r.stdout.toString().split('\n');
  assert.equal(cmdline?.replace(/\0/g, ''), '/init');
  assert.equal(uid, '0');
  assert.equal(hostname, sb.id);
  const info = await sb.agent.info();
  assert.equal(info.protocol, 1);
  assert.match(info.kernel, /cloud-amd64/);
});

test('ten execs run at once and each gets its own output', async () => {
  const runs = Array.from({ length: 10 }, (_, i) =>
    sh(`sleep 0.3; echo out-${i}; echo err-${i} >&2`),
  );
  const results = await Promise.all(runs);
  results.forEach((r, i) => {
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout.toString(), `out-${i}\n`);
    assert.equal(r.stderr.toString(), `err-${i}\n`);
  });
});

test('a timeout kills the guest process and says so', async () => {
  const r = await sh('sleep 300', 1000);
  assert.equal(r.timedOut, true);
  assert.equal(r.signal, 'SIGKILL');
  const ps = await sh('ps -o args | grep -c "^sleep 300" || true');
  assert.equal(ps.stdout.toString().trim(), '0', 'the timed-out sleep still runs');
});

test('a crashing command never takes down PID 1; orphans are reaped', async () => {
  const r = await sh('kill -SEGV $$');
  assert.equal(r.signal, 'SIGSEGV');
  assert.equal(r.exitCode, null);
  await sh('(sleep 0.2 &) ; exit 0');
  await new Promise((resolve) => setTimeout(resolve, 600));
  const zombies = await sh('ps -o stat | grep -c "^Z" || true');
  assert.equal(zombies.stdout.toString().trim(), '0', 'an orphan was left as a zombie');
  assert.equal((await sh('echo alive')).stdout.toString(), 'alive\n');
});

test('binary files of 0 B, 1 B and 10 MB round-trip byte-identical', async () => {
  for (const size of [0, 1, 10 * 1024 * 1024]) {
    const data = randomBytes(size);
    const path = `/tmp/rt/${size}.bin`;
    assert.equal(await sb.agent.writeFile(path, data), size);
    const back = await sb.agent.readFile(path);
    assert.ok(back.equals(data), `${size} B differs after the round trip`);
    const st = await sb.agent.stat(path);
    assert.equal(st.size, size);
  }
  const md5 = await sh('md5sum /tmp/rt/1.bin | cut -c1-32');
  assert.match(md5.stdout.toString(), /^[0-9a-f]{32}\n$/);
});

test('the host disconnects mid-exec, reconnects, resyncs, and the next request works', async () => {
  const running = sb.agent.exec({ argv: ['sh', '-c', 'echo started; sleep 3; echo late'] });
  await running.started;
  sb.agent.close();
  await assert.rejects(running.result, { code: 'agent_unreachable' });
  sb.agent = await AgentClient.connect(sb.vm.files.agent, { timeoutMs: 10_000 });
  await sb.agent.ping();
  const r = await sh('echo again');
  assert.equal(r.stdout.toString(), 'again\n');
});

test('malformed and oversized messages get error replies; the agent keeps serving', async () => {
  sb.agent.close();
  const raw = await RawAgentSocket.connect(sb.vm.files.agent);
  try {
    await raw.sync();
    const cases: [string, string][] = [
      ['this is not json\n', 'bad_json'],
      ['[1,2,3]\n', 'bad_json'],
      ['{"type":"no_such_type","id":5}\n', 'unknown_type'],
      [`{"type":"ping","id":6,"pad":"${'x'.repeat(2 * 1024 * 1024)}"}\n`, 'too_large'],
      [`${'['.repeat(50)}${']'.repeat(50)}\n`, 'too_large'],
      ['\x00\x01\x02garbage\x7f\n', 'bad_json'],
    ];
    for (const [line, code] of cases) {
      await raw.write(line);
      const reply = await raw.next(30_000);
      assert.equal(reply.type, 'error', `reply to ${line.slice(0, 40)}`);
      assert.equal(reply.code, code, `code for ${line.slice(0, 40)}`);
    }
    await raw.send({ type: 'ping', id: 7 });
    const pong = await raw.next();
    assert.deepEqual([pong.type, pong.id], ['result', 7]);
  } finally {
    raw.close();
  }
  sb.agent = await AgentClient.connect(sb.vm.files.agent, { timeoutMs: 10_000 });
  assert.equal((await sh('echo still')).stdout.toString(), 'still\n');
});
