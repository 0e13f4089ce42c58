/**
 * A test's own "outside world": a network namespace reached from the host over a veth,
 * holding two test hosts (198.51.100.2 and 203.0.113.2, documentation ranges that nothing
 * real uses) that serve HTTP, HTTPS (a self-signed certificate made here) and DNS
 * (world-server.ts). Sandboxes reach it through forkd's
 * NAT exactly as they would reach the internet; `close` removes every trace of it.
 *
 * One world at a time on a host: its addresses and the host route to 203.0.113.0/24 are
 * fixed, so test files that run side by side (network, dns-upstream) take turns through a
 * `flock(1)` lock held from start to close (the kernel drops it if the test dies).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { run } from '../../src/util/exec.js';
import { selfSignedCert } from './certs.js';

export const WORLD = {
  a: '198.51.100.2',
  b: '203.0.113.2',
  /** Names the world's DNS server answers. */
  names: { 'a.test': '198.51.100.2', 'b.test': '203.0.113.2', 'allowed.test': '203.0.113.2' },
  dns: { host: '198.51.100.2', port: 53 },
} as const;

export interface World {
  name: string;
  close(): Promise<void>;
}

/** Wait (up to 15 min) for the host's one world; resolves with its release. */
async function holdWorldLock(): Promise<() => Promise<void>> {
  const holder = spawn(
    'flock',
    ['-w', '900', '/run/forkd-test-world.lock', 'sh', '-c', 'echo held; exec cat >/dev/null'],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const exited = once(holder, 'exit');
  await Promise.race([
    once(holder.stdout, 'data'),
    exited.then(([code]) => {
      throw new Error(`the test world lock was not free within 15 min (flock exit ${code})`);
    }),
  ]);
  return async () => {
    holder.stdin.end();
    await exited;
  };
}

export async function startWorld(): Promise<World> {
  const name = `fkdworld-${process.pid}`;
  const veth = `fkdw-${process.pid % 100000}`;
  let server: ChildProcess | undefined;
  const release = await holdWorldLock();
  const tlsDir = await mkdtemp(join(tmpdir(), 'fkdworld-'));
  const close = async () => {
    if (server?.pid && server.exitCode === null) {
      server.kill('SIGKILL');
      await once(server, 'exit').catch(() => undefined);
    }
    await run('ip', ['link', 'del', veth]).catch(() => undefined);
    await run('ip', ['route', 'del', '203.0.113.0/24']).catch(() => undefined);
    await run('ip', ['netns', 'del', name]).catch(() => undefined);
    await rm(tlsDir, { recursive: true, force: true });
    await release();
  };
  try {
    await run('ip', ['netns', 'add', name]);
    await run('ip', ['-batch', '-'], {
      input: [
        `link add ${veth} type veth peer name eth0 netns ${name}`,
        `addr add 198.51.100.1/24 dev ${veth}`,
        `link set ${veth} up`,
        `route add 203.0.113.0/24 via ${WORLD.a} dev ${veth}`,
      ].join('\n'),
    });
    await run('ip', ['-n', name, '-batch', '-'], {
      input: [
        `addr add ${WORLD.a}/24 dev eth0`,
        `addr add ${WORLD.b}/24 dev eth0`,
        'link set lo up',
        'link set eth0 up',
        'route add default via 198.51.100.1',
      ].join('\n'),
    });
    const made = await selfSignedCert(tlsDir, 'world.test');
    const tls = { WORLD_TLS_KEY: made.key, WORLD_TLS_CERT: made.cert };
    const script = fileURLToPath(new URL('./world-server.js', import.meta.url));
    const records = Object.entries(WORLD.names).map(([n, ip]) => `${n}=${ip}`);
    server = spawn(
      'nsenter',
      [`--net=/run/netns/${name}`, '--', process.execPath, script, ...records],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env: { ...process.env, ...tls },
      },
    );
    await new Promise<void>((resolve, reject) => {
      server?.stdout?.once('data', () => resolve());
      server?.once('exit', (code) => reject(new Error(`world server exited (${code})`)));
    });
    return { name, close };
  } catch (e) {
    await close();
    throw e;
  }
}
