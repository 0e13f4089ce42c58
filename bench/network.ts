/**
 * Network benchmark (issue 13), real VMs, real namespaces and nftables, against the test's
 * own outside world (test/helpers/world.ts, a namespace with HTTP and DNS servers):
 *  - fork → first `exec` answered, `nat` vs `none`, without and with the VMM pool;
 *  - HTTP GET round trip guest → test server (busybox wget, one process per request);
 *  - throughput of a 100 MB download from the test server into /dev/null;
 *  - with `--name-proxy` only: the same GET loop (HTTP and HTTPS) allowed by address (the
 *    filter) and by name through the name proxy, with and without the check that the name
 *    resolves to where the connection goes.
 * Usage: node dist/bench/network.js [--runs N] [--name-proxy]
 */
import { caller, startBenchServices, type BenchServices } from './services.js';
import { summary } from './stats.js';
import { startWorld, WORLD } from '../test/helpers/world.js';

const args = process.argv.slice(2);
const RUNS = args.includes('--runs') ? Number(args[args.indexOf('--runs') + 1]) : 8;
const GETS = 20;

async function forkToExec(s: BenchServices, tag: string): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    await s.snapshots.pool.settled(tag);
    const t = performance.now();
    const r = await s.snapshots.fork({ snapshot: tag, n: 1 }, caller);
    const id = r.sandboxes[0]?.id;
    if (!id) throw new Error(JSON.stringify(r.failed));
    await s.sandboxes.exec(id, { argv: ['true'] });
    ms.push(performance.now() - t);
    await s.sandboxes.kill(id);
  }
  return ms;
}

/** How long `script` took in the guest; with `showErrors`, what it wrote to stderr is printed. */
async function timed(s: BenchServices, id: string, script: string, showErrors = false) {
  const t = performance.now();
  const r = await s.sandboxes.exec(id, { argv: ['sh', '-c', script] });
  const ms = performance.now() - t;
  const err = Buffer.from(r.stderr, 'base64').toString().trim();
  if (r.exit_code !== 0) throw new Error(`${script}: exit ${r.exit_code}: ${err}`);
  if (showErrors && err) console.log(`  (${err.replace(/\n/g, '; ')})`);
  return ms;
}

/**
 * Per-request time of `GETS` busybox GETs of `url`, 5 rounds; a failed GET is counted
 * (printed), not fatal: more than one in a round fails the bench.
 */
async function getLoop(s: BenchServices, id: string, url: string): Promise<number[]> {
  await timed(s, id, `wget -q -O /dev/null ${url}`);
  const rtts: number[] = [];
  for (let i = 0; i < 5; i++) {
    const get = `wget -q -O /dev/null ${url} 2>/tmp/err || { f=$((f+1)); cat /tmp/err >&2; }`;
    const loop = `f=0; i=0; while [ $i -lt ${GETS} ]; do ${get}; i=$((i+1)); done; [ $f -le 1 ] || exit 1; [ $f -eq 0 ] || echo "1 of ${GETS} GETs of ${url} failed" >&2`;
    rtts.push((await timed(s, id, loop, true)) / GETS);
  }
  return rtts;
}

/**
 * The name proxy's cost, two sandboxes on the same targets: one allowed `allowed.test` only
 * (the proxy checks the name resolves, by the daemon's lookup, to where the connection goes),
 * one open to the internet with a hostname deny entry (the proxy reads the name, no check:
 * what every named connection cost before the check). `allowed.test` is put in /etc/hosts,
 * so its connections reach the proxy and not the filter's DNS-learned sets.
 */
async function nameProxy(s: BenchServices): Promise<void> {
  await s.snapshots.create({ tag: 'nat', network: 'nat' }, caller);
  const fork = async (egress: object) =>
    (await s.snapshots.fork({ snapshot: 'nat', n: 1, egress }, caller)).sandboxes[0]?.id as string;
  const checked = await fork({ allow_internet: false, allow_out: [WORLD.a, 'allowed.test'] });
  const unchecked = await fork({ allow_internet: true, deny_out: ['denied.test'] });
  for (const id of [checked, unchecked]) {
    await timed(s, id, `echo '${WORLD.b} allowed.test' >> /etc/hosts`);
  }
  console.log(`HTTP GET per request over ${GETS} (ms):`);
  const row = async (what: string, id: string, url: string) =>
    console.log(`  ${what.padEnd(44)} ${summary(await getLoop(s, id, url))}`);
  await row('HTTP by address (filter)', checked, `http://${WORLD.a}/hello`);
  await row('HTTPS by address (filter)', checked, `https://${WORLD.a}/hello`);
  await row('HTTP by Host, name read, no check', unchecked, 'http://allowed.test/hello');
  await row('HTTP by Host, name checked against DNS', checked, 'http://allowed.test/hello');
  await row('HTTPS by SNI, name read, no check', unchecked, 'https://allowed.test/hello');
  await row('HTTPS by SNI, name checked against DNS', checked, 'https://allowed.test/hello');
}

async function main(): Promise<void> {
  const world = await startWorld();
  const s = await startBenchServices(['busybox'], { network: { upstream: WORLD.dns } });
  try {
    if (args.includes('--name-proxy')) return await nameProxy(s);
    await s.snapshots.create({ tag: 'nat', network: 'nat' }, caller);
    await s.snapshots.create({ tag: 'none', network: 'none' }, caller);
    console.log(`fork → first exec, ${RUNS} runs each (ms)`);
    for (const pool of [0, 2]) {
      for (const tag of ['none', 'nat']) {
        await s.snapshots.setPool(tag, pool);
        console.log(`  ${tag.padEnd(4)} pool ${pool}: ${summary(await forkToExec(s, tag))}`);
        await s.snapshots.setPool(tag, 0);
      }
    }
    const id = (await s.snapshots.fork({ snapshot: 'nat', n: 1 }, caller)).sandboxes[0]
      ?.id as string;
    const rtts = await getLoop(s, id, `http://${WORLD.a}/hello`);
    const empty =
      (await timed(s, id, `i=0; while [ $i -lt ${GETS} ]; do true; i=$((i+1)); done`)) / GETS;
    console.log(`HTTP GET guest → test server, per request over ${GETS}: ${summary(rtts)}`);
    console.log(`  (an exec of the same loop without wget: ${empty.toFixed(1)} ms per turn)`);
    for (let i = 0; i < 2; i++) {
      const ms = await timed(s, id, `wget -q -O /dev/null 'http://${WORLD.a}/bytes?mb=100'`);
      console.log(
        `100 MiB download: ${ms.toFixed(0)} ms = ${((100 * 8 * 1.048576) / (ms / 1000)).toFixed(0)} Mbit/s`,
      );
    }
  } finally {
    await s.close();
    await world.close();
  }
}

await main();
