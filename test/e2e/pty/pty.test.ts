/**
 * Terminal sessions end to end: a real `forkd daemon`, one real busybox sandbox (TCG) shared
 * by every test. `forkd shell` is driven through a real pseudo-terminal (a private tmux
 * server): a prompt, a command's output, a window resize seen by `stty size`, Ctrl-C
 * interrupting `sleep 100`, `exit 3` giving 3. The SDK's session; a daemon restart in the
 * middle of a session (the agent kept it: reattach replays what was missed); and a session
 * that keeps going through a branch of its sandbox, in both branch modes, while the child of
 * the branch starts without it (hung up on restore).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox, Snapshot, type PtyHandle } from '@forkd/sdk';
import { CLI } from '../../helpers/cli.js';
import { startDaemon, type DaemonProcess } from '../../helpers/daemon-process.js';
import { makeTestHome, type TestHome } from '../../helpers/home.js';

const run = promisify(execFile);
/** TCG on a loaded host: a keystroke's echo can take a while. */
const WAIT_MS = 30_000;

let home: TestHome;
let daemon: DaemonProcess | undefined;
let sbx: Sandbox;
const url = () => (daemon as DaemonProcess).url;

before(async () => {
  home = await makeTestHome();
  daemon = await startDaemon(home);
  sbx = await Sandbox.create({ url: url(), image: 'busybox' });
});
after(async () => {
  try {
    for (const tag of ['pty-copy', 'pty-live']) {
      await Snapshot.remove(tag, { url: url(), force: true }).catch(() => undefined);
    }
    const left = await Sandbox.list({ url: url() }).catch(() => []);
    await Promise.allSettled(left.map((s) => Sandbox.kill(s.id, { url: url() })));
  } finally {
    await daemon?.stop();
    await home.cleanup();
  }
});

/** Polls `read` until `ok` holds (bounded); fails with the last value seen. */
async function until<T>(
  read: () => Promise<T> | T,
  ok: (v: T) => boolean,
  what: string,
): Promise<T> {
  const deadline = Date.now() + WAIT_MS;
  let last: T;
  for (;;) {
    last = await read();
    if (ok(last)) return last;
    if (Date.now() > deadline)
      assert.fail(`${what}: not seen in ${WAIT_MS} ms; last: ${String(last)}`);
    await sleep(100);
  }
}

/** A private tmux server (its own socket) with one 80x24 window. */
class Tmux {
  constructor(private readonly socket: string) {}

  async cmd(...args: string[]): Promise<string> {
    return (await run('tmux', ['-S', this.socket, ...args], { env: home.env })).stdout;
  }

  screen(): Promise<string> {
    return this.cmd('capture-pane', '-p', '-J', '-t', 'pty');
  }

  keys(...keys: string[]): Promise<string> {
    return this.cmd('send-keys', '-t', 'pty', ...keys);
  }

  /** Types a line and waits for `expect` on the screen. */
  async line(text: string, expect: RegExp): Promise<string> {
    await this.keys('-l', text);
    await this.keys('Enter');
    return until(
      () => this.screen(),
      (s) => expect.test(s),
      `${text} → ${expect}`,
    );
  }
}

test('forkd shell through a real terminal: prompt, output, resize, Ctrl-C, exit 3', async (t) => {
  const tmux = new Tmux(join(home.dir, 'tmux.sock'));
  const status = join(home.dir, 'shell.status');
  const shell = `FORKD_URL=${url()} ${process.execPath} ${CLI} shell ${sbx.id}; echo $? > ${status}; sleep 60`;
  await tmux.cmd('new-session', '-d', '-s', 'pty', '-x', '80', '-y', '24', shell);
  t.after(() => tmux.cmd('kill-server').catch(() => undefined));

  await until(
    () => tmux.screen(),
    (s) => /[#$] ?$/m.test(s),
    'a prompt',
  );
  await tmux.line('echo out-$((6*7))', /^out-42$/m);
  await tmux.line('stty size', /^24 80$/m);
  await tmux.cmd('resize-window', '-t', 'pty', '-x', '100', '-y', '30');
  await tmux.line('stty size', /^30 100$/m);

  await tmux.keys('-l', 'sleep 100; echo slept');
  await tmux.keys('Enter');
  await sleep(1000);
  const started = Date.now();
  await tmux.keys('C-c');
  await tmux.line('echo after-$((2+3))', /^after-5$/m);
  assert.ok(Date.now() - started < 60_000);
  assert.doesNotMatch(await tmux.screen(), /^slept$/m);

  await tmux.keys('-l', 'exit 3');
  await tmux.keys('Enter');
  const code = await until(
    () => readFile(status, 'utf8').catch(() => ''),
    (s) => s.trim() !== '',
    'forkd shell to exit',
  );
  assert.equal(code.trim(), '3');
});

/** A session whose output is collected, and a wait for a piece of it. */
async function session(s: Sandbox = sbx) {
  let text = '';
  const term = await s.pty.create({
    cols: 80,
    rows: 24,
    onData: (d) => void (text += Buffer.from(d)),
  });
  const seen = (re: RegExp) =>
    until(
      () => text,
      (x) => re.test(x),
      String(re),
    );
  return { term, seen, text: () => text };
}

test('SDK: create, sendInput, onData, kill', async () => {
  const { term, seen } = await session();
  term.sendInput('echo sdk-$((6*7))\r');
  await seen(/sdk-42/);
  await term.kill();
  const end = await term.wait();
  assert.equal(end.exitCode, null);
  assert.match(String(end.signal), /SIGKILL|SIGHUP/);
});

test('a session survives a daemon restart: reattach replays what it missed', async () => {
  const { term, seen } = await session();
  term.sendInput('echo before-$((1+1))\r');
  await seen(/before-2/);
  const since = term.offset;
  // Typed into a session nobody watches; the agent keeps its output in its ring.
  term.sendInput('sleep 2; echo meanwhile-$((3+3))\r');
  await daemon?.stop();
  daemon = await startDaemon(home);
  await sleep(2500);
  let text = '';
  const again: PtyHandle = await sbx.pty.connect(term.session, {
    since,
    onData: (d) => void (text += Buffer.from(d)),
  });
  await until(
    () => text,
    (x) => /meanwhile-6/.test(x),
    'the output of the restart gap',
  );
  assert.doesNotMatch(text, /before-2/);
  again.sendInput('exit 5\r');
  assert.equal((await again.wait()).exitCode, 5);
});

for (const mode of ['copy', 'live'] as const) {
  test(`a session keeps going through a ${mode} branch of its sandbox`, async () => {
    const { term, seen } = await session();
    term.sendInput('echo pre-$((4+4))\r');
    await seen(/pre-8/);
    // A second session, recognisable in `ps`: its child of the branch must not have it.
    const marker = await sbx.pty.create({
      cols: 80,
      rows: 24,
      cmd: 'exec sleep 4321',
      onData: () => {},
    });
    const r = await sbx.branch({ tag: `pty-${mode}`, mode, fork: mode === 'copy' ? 1 : 0 });
    assert.equal(r.mode, mode);
    term.sendInput('echo post-$((5+5))\r');
    await seen(/post-10/);
    term.sendInput('exit 0\r');
    assert.equal((await term.wait()).exitCode, 0);
    const child = r.children?.sandboxes[0];
    if (child) {
      const ps = await until(
        async () => (await child.commands.run('ps')).stdout,
        (out) => !/sleep 4321/.test(out),
        'the inherited session hung up in the child',
      );
      assert.doesNotMatch(ps, /sleep 4321/);
      assert.match((await sbx.commands.run('ps')).stdout, /sleep 4321/, 'the source keeps it');
      await child.kill();
    }
    await marker.kill();
    await marker.wait();
  });
}
