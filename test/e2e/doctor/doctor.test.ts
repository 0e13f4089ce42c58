/** `forkd doctor` against the real host: every check reported, FAIL when QEMU is missing. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { forkd } from '../../helpers/cli.js';
import { forkdHome } from '../../../src/config.js';
import { CHECK_IDS, type CheckResult } from '../../../src/services/doctor.js';

interface Report {
  ok: boolean;
  checks: CheckResult[];
}

async function doctor(env: NodeJS.ProcessEnv): Promise<{ code: number | null; report: Report }> {
  const r = await forkd(['doctor', '--json'], { env });
  return { code: r.code, report: JSON.parse(r.stdout.toString()) as Report };
}

test('--json reports every check with a valid status; the exit code follows FAILs', async () => {
  const { code, report } = await doctor(process.env);
  assert.deepEqual(
    report.checks.map((c) => c.id),
    [...CHECK_IDS],
  );
  for (const c of report.checks) {
    assert.ok(['pass', 'warn', 'fail'].includes(c.status), `${c.id}: ${c.status}`);
    assert.ok(c.summary.length > 0, c.id);
    if (c.status !== 'pass') assert.ok(c.fix, `${c.id} says how to fix it`);
  }
  const failed = report.checks.filter((c) => c.status === 'fail');
  assert.equal(report.ok, failed.length === 0);
  assert.equal(code, failed.length === 0 ? 0 : 1);
});

test('on this host every tool check passes; only set-up state may fail', async () => {
  const { report } = await doctor({ ...process.env, FORKD_HOME: forkdHome() });
  const setupState = ['guest'];
  const failed = report.checks.filter((c) => c.status === 'fail' && !setupState.includes(c.id));
  assert.deepEqual(failed, []);
});

test('without QEMU on PATH: qemu FAILs with a fix, and doctor exits non-zero', async () => {
  const { code, report } = await doctor({ ...process.env, PATH: '/usr/sbin:/sbin' });
  const qemu = report.checks.find((c) => c.id === 'qemu');
  assert.equal(qemu?.status, 'fail');
  assert.match(qemu?.fix ?? '', /apt-get install qemu-system-x86/);
  assert.equal(report.ok, false);
  assert.equal(code, 1);
});

test('human output: aligned STATUS  id  summary lines, fixes indented below', async () => {
  const r = await forkd(['doctor'], { env: { ...process.env, PATH: '/usr/sbin:/sbin' } });
  const lines = r.stdout.toString().split('\n');
  assert.ok(lines.some((l) => /^FAIL {2}qemu\s{2,}qemu-system-x86_64 not found on PATH$/.test(l)));
  const i = lines.findIndex((l) => l.startsWith('FAIL  qemu '));
  assert.match(lines[i + 1] ?? '', /^\s{8,}fix: apt-get install qemu-system-x86$/);
});

test('live-branch: PASS on this host (root, x86_64); WARN naming why where the probe cannot run', async () => {
  const here = (await doctor(process.env)).report.checks.find((c) => c.id === 'live-branch');
  assert.equal(here?.status, 'pass', here?.summary);
  assert.match(here?.summary ?? '', /test fork by ptrace injection: [\d.]+ ms/);
  // The memory a live copy is lent, and how much the host can give now (docs/limits.md).
  assert.match(
    here?.summary ?? '',
    /lent over its limit: (\d+ MiB|no limit) free now \((the host|the cgroups .*)\)/,
  );
  const env = { ...process.env, FORKD_CAPTURE_BIN: '/nonexistent/forkd-capture' };
  const there = (await doctor(env)).report.checks.find((c) => c.id === 'live-branch');
  assert.equal(there?.status, 'warn');
  assert.match(there?.summary ?? '', /live branch unavailable: .*forkd-capture.*mode copy/);
  assert.match(there?.fix ?? '', /ptrace/);
});

test('cgroups: which version enforces the limits, and where each controller is', async () => {
  const c = (await doctor(process.env)).report.checks.find((x) => x.id === 'cgroups');
  assert.equal(c?.status, 'pass', c?.summary);
  assert.match(c?.summary ?? '', /^cgroup v[12] enforces memory .* cpu .* pids/);
  assert.match(
    c?.summary ?? '',
    /(hierarchies memory \/\S+, cpu \/\S+.*pids \/\S+|controllers memory, cpu, pids under \/)/,
  );
});

test('confinement: PASS naming the seccomp filter, a uid per sandbox and the jail; WARN when turned off', async () => {
  const here = (await doctor(process.env)).report.checks.find((c) => c.id === 'confinement');
  assert.equal(here?.status, 'pass', here?.summary);
  assert.match(here?.summary ?? '', /-sandbox on,obsolete=deny,.*uid of its own per sandbox/);
  assert.match(here?.summary ?? '', /no capabilities/);
  assert.match(here?.summary ?? '', /jailed in a mount and an IPC namespace per QEMU/);
  const unjailed = { ...process.env, FORKD_QEMU_JAIL: 'off' };
  const open = (await doctor(unjailed)).report.checks.find((c) => c.id === 'confinement');
  assert.equal(open?.status, 'warn');
  assert.match(open?.summary ?? '', /not jailed: turned off \(FORKD_QEMU_JAIL=off\)/);
  const off = { ...process.env, FORKD_CONFINE: 'off' };
  const there = (await doctor(off)).report.checks.find((c) => c.id === 'confinement');
  assert.equal(there?.status, 'warn');
  assert.match(there?.summary ?? '', /unconfined/);
  assert.match(there?.fix ?? '', /FORKD_CONFINE/);
});
