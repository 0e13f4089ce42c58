/**
 * The cgroup driver's pure logic for both versions, whichever this host mounts: parsing
 * mountinfo and /proc/PID/cgroup (v1 split and comounted, v2, hybrid, a container's mount
 * root), choosing the layout, the directory of a sandbox's cgroup, the files and values
 * that set limits, and reading usage and OOM kills; memory limits and MemAvailable.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  Cgroup,
  cgroupDir,
  chooseLayout,
  limitWrites,
  memoryFiles,
  parseMemoryLimit,
  parseMountinfo,
  parseProcCgroup,
  parseUsage,
} from '../../../src/drivers/host/cgroup.js';
import { meminfoField } from '../../../src/drivers/host/meminfo.js';

/** This host's shape: v1 per controller (cpu and cpuacct apart), an empty cgroup2 beside. */
const HYBRID_MOUNTS = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw`;
const HYBRID_SELF = `8:pids:/
4:memory:/process_api/abc
2:cpuacct:/
1:cpu:/
0::/`;

const V2_MOUNTS = '29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate';
const V2_SELF = '0::/system.slice/forkd.service';

test('a v1 host: one directory per hierarchy, under the cgroup this process is in', () => {
  const layout = chooseLayout(parseMountinfo(HYBRID_MOUNTS), parseProcCgroup(HYBRID_SELF), []);
  assert.deepEqual(layout, {
    version: 'v1',
    dirs: {
      memory: '/sys/fs/cgroup/memory/process_api/abc',
      cpu: '/sys/fs/cgroup/cpu',
      pids: '/sys/fs/cgroup/pids',
      cpuacct: '/sys/fs/cgroup/cpuacct',
    },
  });
  assert.ok(!('reason' in layout));
  const cg = new Cgroup(layout, ['forkd-0123456789', 'sbx-000000000001']);
  assert.equal(
    cg.dirs().memory,
    '/sys/fs/cgroup/memory/process_api/abc/forkd-0123456789/sbx-000000000001',
  );
  assert.equal(cg.dirs().cpu, '/sys/fs/cgroup/cpu/forkd-0123456789/sbx-000000000001');
});

test('cpu and cpuacct mounted together are one hierarchy', () => {
  const mounts = parseMountinfo(
    '32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n' +
      '35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n' +
      '38 31 0:35 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids',
  );
  const self = parseProcCgroup('3:cpu,cpuacct:/a\n2:memory:/a\n1:pids:/a');
  const layout = chooseLayout(mounts, self, []);
  assert.ok(!('reason' in layout));
  assert.equal(layout.dirs.cpu, '/sys/fs/cgroup/cpu,cpuacct/a');
  assert.equal(layout.dirs.cpuacct, layout.dirs.cpu);
});

test('a v2 host: one directory, when its cgroup offers memory, cpu and pids', () => {
  const mounts = parseMountinfo(V2_MOUNTS);
  const self = parseProcCgroup(V2_SELF);
  const dir = '/sys/fs/cgroup/system.slice/forkd.service';
  assert.deepEqual(chooseLayout(mounts, self, ['cpuset', 'cpu', 'io', 'memory', 'pids']), {
    version: 'v2',
    dirs: { memory: dir, cpu: dir, pids: dir },
  });
  assert.deepEqual(chooseLayout(mounts, self, ['cpu', 'io']), {
    reason: "cgroup v2 does not offer memory, pids to forkd's cgroup",
  });
});

test('a hybrid host whose cgroup2 carries no controllers falls back to v1', () => {
  const layout = chooseLayout(parseMountinfo(HYBRID_MOUNTS), parseProcCgroup(HYBRID_SELF), [
    'hugetlb',
  ]);
  assert.ok(!('reason' in layout));
  assert.equal(layout.version, 'v1');
});

test('nothing mounted: the reason names what is missing', () => {
  assert.deepEqual(chooseLayout(parseMountinfo(''), parseProcCgroup(''), []), {
    reason: 'no cgroup hierarchy for memory, cpu, pids is mounted',
  });
});

test("a container's mount shows its hierarchy from a root below /", () => {
  const mount = { point: '/sys/fs/cgroup', root: '/docker/abc' };
  assert.equal(cgroupDir(mount, '/docker/abc'), '/sys/fs/cgroup');
  assert.equal(cgroupDir(mount, '/docker/abc/inner'), '/sys/fs/cgroup/inner');
  assert.equal(cgroupDir(mount, '/elsewhere'), undefined);
  const escaped = parseMountinfo('29 23 0:26 / /sys/fs/cg\\040x rw - cgroup2 cgroup2 rw');
  assert.equal(escaped.v2?.point, '/sys/fs/cg x');
});

test('limits in v2 and v1 terms; none is max / -1', () => {
  const limits = { memoryBytes: 320 * 1024 * 1024, cpuCores: 0.5, pids: 128 };
  assert.deepEqual(limitWrites('v2', limits), [
    { hierarchy: 'memory', file: 'memory.max', value: '335544320' },
    { hierarchy: 'cpu', file: 'cpu.max', value: '50000 100000' },
    { hierarchy: 'cpu', file: 'cpu.weight', value: '50' },
    { hierarchy: 'pids', file: 'pids.max', value: '128' },
  ]);
  assert.deepEqual(limitWrites('v1', limits), [
    { hierarchy: 'memory', file: 'memory.limit_in_bytes', value: '335544320' },
    { hierarchy: 'cpu', file: 'cpu.cfs_period_us', value: '100000' },
    { hierarchy: 'cpu', file: 'cpu.cfs_quota_us', value: '50000' },
    { hierarchy: 'cpu', file: 'cpu.shares', value: '512' },
    { hierarchy: 'pids', file: 'pids.max', value: '128' },
  ]);
  const none = { memoryBytes: null, cpuCores: null, pids: null };
  assert.deepEqual(
    limitWrites('v2', none).map((w) => w.value),
    ['max', 'max 100000', '100', 'max'],
  );
  assert.deepEqual(
    limitWrites('v1', none).map((w) => w.value),
    ['-1', '100000', '-1', '1024', 'max'],
  );
});

test('usage and OOM kills from v2 and v1 files', () => {
  assert.deepEqual(
    parseUsage('v2', {
      cpu: 'usage_usec 2500000\nuser_usec 2000000\nnr_throttled 3\nthrottled_usec 750000\n',
      memory: '104857600\n',
      throttle: 'usage_usec 2500000\nnr_throttled 3\nthrottled_usec 750000\n',
      oom: 'low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n',
    }),
    { cpuSeconds: 2.5, memoryBytes: 104857600, throttledSeconds: 0.75, oomKills: 1 },
  );
  assert.deepEqual(
    parseUsage('v1', {
      cpu: '3000000000\n',
      memory: '52428800\n',
      throttle: 'nr_periods 40\nnr_throttled 20\nthrottled_time 1500000000\n',
      oom: 'oom_kill_disable 0\nunder_oom 0\noom_kill 2\n',
    }),
    { cpuSeconds: 3, memoryBytes: 52428800, throttledSeconds: 1.5, oomKills: 2 },
  );
  assert.equal(parseUsage('v1', { cpu: '', memory: '', throttle: '', oom: '' }).cpuSeconds, 0);
});

test('memory limits as the kernel shows them: none is v2 "max" or v1\'s page-rounded 2^63-1', () => {
  assert.equal(parseMemoryLimit('max\n'), null);
  assert.equal(parseMemoryLimit('9223372036854771712\n'), null);
  assert.equal(parseMemoryLimit('536870912\n'), 536870912);
  assert.deepEqual(memoryFiles('v1'), {
    limit: 'memory.limit_in_bytes',
    usage: 'memory.usage_in_bytes',
    peak: 'memory.max_usage_in_bytes',
  });
  assert.equal(memoryFiles('v2').peak, 'memory.peak');
});

test('MemAvailable from /proc/meminfo, in bytes', () => {
  const text =
    'MemTotal:       24573144 kB\nMemFree:        23000000 kB\nMemAvailable:   23262208 kB\n';
  assert.equal(meminfoField(text, 'MemAvailable'), 23262208 * 1024);
  assert.equal(meminfoField(text, 'SwapTotal'), undefined);
});
