/**
 * Two "nodes" and a registry on one host, for the chunked-pull test: three network
 * namespaces this test makes (`fkn<pid>a`, `fkn<pid>b`, `fkn<pid>r`; never forkd's `fkd-N`),
 * the registry's holding a bridge both nodes' veths join (10.250.0.1; nodes .2 and .3), and
 * Debian's `docker-registry` run inside it on a data dir that outlives a stop, so the test
 * can stop it mid-pull and start it again. Everything lives inside those namespaces: no
 * address or link is added to the host's own; deleting them removes the veths and bridge.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../../../src/util/exec.js';

export const REGISTRY_IP = '10.250.0.1';
const REGISTRY_PORT = 5000;

export interface Nodes {
  /** `nsenter --net=` paths of node A's and node B's namespaces. */
  a: string;
  b: string;
  /** host:port of the registry, as both nodes reach it. */
  registry: string;
  /** Limit node B's link to the registry (a slow pull the test can cut mid-way); undefined: none. */
  throttleB(mbit?: number): Promise<void>;
  startRegistry(): Promise<void>;
  /** SIGKILL the registry: every connection to it breaks at once. */
  stopRegistry(): Promise<void>;
  /** Its storage root (blobs under docker/registry/v2). */
  dataDir: string;
  cleanup(): Promise<void>;
}

const ip = (args: string[]) => run('ip', args);

export async function makeNodes(scratch: string): Promise<Nodes> {
  const name = (s: string) => `fkn${process.pid}${s}`;
  const [ra, rb, rr] = [name('a'), name('b'), name('r')];
  const made: string[] = [];
  let child: ChildProcess | undefined;
  const dataDir = join(scratch, 'registry');
  const config = join(scratch, 'registry.yml');
  const stopRegistry = async () => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise((r) => c.once('exit', r));
    c.kill('SIGKILL');
    await gone;
  };
  const cleanup = async () => {
    await stopRegistry();
    for (const ns of made.reverse()) await ip(['netns', 'del', ns]).catch(() => undefined);
  };
  try {
    for (const ns of [rr, ra, rb]) {
      await ip(['netns', 'add', ns]);
      made.push(ns);
      await ip(['-n', ns, 'link', 'set', 'lo', 'up']);
    }
    await ip(['-n', rr, 'link', 'add', 'br0', 'type', 'bridge']);
    await ip(['-n', rr, 'addr', 'add', `${REGISTRY_IP}/24`, 'dev', 'br0']);
    await ip(['-n', rr, 'link', 'set', 'br0', 'up']);
    for (const [ns, end, addr] of [
      [ra, 'va', '10.250.0.2'],
      [rb, 'vb', '10.250.0.3'],
    ] as const) {
      await ip(['-n', rr, 'link', 'add', end, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
      await ip(['-n', rr, 'link', 'set', end, 'master', 'br0', 'up']);
      await ip(['-n', ns, 'addr', 'add', `${addr}/24`, 'dev', 'eth0']);
      await ip(['-n', ns, 'link', 'set', 'eth0', 'up']);
    }
    await mkdir(dataDir, { recursive: true });
    await writeFile(
      config,
      `version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: ${dataDir}\n` +
        `http:\n  addr: ${REGISTRY_IP}:${REGISTRY_PORT}\n`,
    );
  } catch (e) {
    await cleanup();
    throw e;
  }
  const registry = `${REGISTRY_IP}:${REGISTRY_PORT}`;
  const startRegistry = async () => {
    let log = '';
    const c = spawn(
      'nsenter',
      [`--net=/run/netns/${rr}`, '--', 'docker-registry', 'serve', config],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    c.stdout!.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-8192)));
    c.stderr!.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-8192)));
    child = c;
    const deadline = Date.now() + 20_000;
    for (;;) {
      // Asked from inside node A, as the daemons will.
      const up = await run('nsenter', [
        `--net=/run/netns/${ra}`,
        '--',
        'curl',
        '-sf',
        '-o',
        '/dev/null',
        `http://${registry}/v2/`,
      ]).then(
        () => true,
        () => false,
      );
      if (up) return;
      if (Date.now() > deadline || c.exitCode !== null) {
        await stopRegistry();
        throw new Error(`docker-registry did not start: ${log}`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  try {
    await startRegistry();
  } catch (e) {
    await cleanup();
    throw e;
  }
  return {
    a: `/run/netns/${ra}`,
    b: `/run/netns/${rb}`,
    registry,
    dataDir,
    startRegistry,
    stopRegistry,
    throttleB: async (mbit) => {
      await ip(['netns', 'exec', rr, 'tc', 'qdisc', 'del', 'dev', 'vb', 'root']).catch(
        () => undefined,
      );
      if (mbit === undefined) return;
      await run('ip', [
        'netns',
        'exec',
        rr,
        'tc',
        'qdisc',
        'add',
        'dev',
        'vb',
        'root',
        'tbf',
        'rate',
        `${mbit}mbit`,
        'burst',
        '64kb',
        'latency',
        '400ms',
      ]);
    },
    cleanup: async () => {
      await cleanup();
      await rm(scratch, { recursive: true, force: true });
    },
  };
}
