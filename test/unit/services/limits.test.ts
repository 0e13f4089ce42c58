/**
 * The decisions about limits (services/limits.ts): sizes and their units, the defaults,
 * inheritance and per-fork overrides, and every refusal naming its field and what to do.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isForkdError } from '../../../src/errors.js';
import {
  AUTO_DEFAULTS,
  cgroupParentName,
  defaultLimits,
  formatSize,
  parseLimitDefaults,
  parseSize,
  resolveLimits,
} from '../../../src/services/limits.js';

const MiB = 1024 * 1024;
const ctx = { memoryMiB: 256, cpus: 1, defaults: AUTO_DEFAULTS, cores: 2 };

function refuses(fn: () => unknown, field: string, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(isForkdError(e));
    assert.equal(e.code, 'bad_request');
    assert.equal((e.details as { field?: string } | undefined)?.field ?? field, field);
    assert.match(e.message, pattern);
    return true;
  });
}

test('sizes: powers of 1024, any case, with or without i/B; bare numbers are bytes', () => {
  assert.equal(parseSize('512M', 'f'), 512 * MiB);
  assert.equal(parseSize('512mib', 'f'), 512 * MiB);
  assert.equal(parseSize('1.5G', 'f'), 1536 * MiB);
  assert.equal(parseSize('1K', 'f'), 1024);
  assert.equal(parseSize('2 GB', 'f'), 2048 * MiB);
  assert.equal(parseSize('1048576', 'f'), MiB);
  refuses(() => parseSize('512X', 'limits.memory'), 'limits.memory', /unknown unit "X"/);
  refuses(() => parseSize('lots', 'limits.memory'), 'limits.memory', /not a size/);
  assert.equal(formatSize(256 * MiB), '256M');
  assert.equal(formatSize(1536 * MiB), '1.5G');
});

test('defaults: guest RAM + 256M, the vCPUs but at most half the host, 512 QEMU threads', () => {
  assert.deepEqual(defaultLimits(ctx), { memory_bytes: 512 * MiB, cpu: 1, pids: 512 });
  assert.equal(defaultLimits({ ...ctx, cpus: 4, cores: 16 }).cpu, 4);
  assert.equal(defaultLimits({ ...ctx, cpus: 4, cores: 2 }).cpu, 1);
  const fixed = parseLimitDefaults({ memory: '128M', cpu: 'none', pids: 'none' });
  assert.deepEqual(defaultLimits({ ...ctx, defaults: fixed }), {
    memory_bytes: 256 * MiB, // never below the guest's RAM
    cpu: null,
    pids: null,
  });
  assert.throws(() => parseLimitDefaults({ cpu: '0' }), /--default-cpu/);
  assert.throws(() => parseLimitDefaults({ memory: '1Q' }), /--default-memory/);
  assert.throws(() => parseLimitDefaults({ pids: '3' }), /limits\.pids/);
});

test('a request overrides what is inherited, field by field', () => {
  const inherited = { memory_bytes: 400 * MiB, cpu: 0.5, pids: 100 };
  assert.deepEqual(resolveLimits(undefined, { ...ctx, inherited }), inherited);
  assert.deepEqual(resolveLimits({ cpu: 0.25 }, { ...ctx, inherited }), {
    ...inherited,
    cpu: 0.25,
  });
  assert.deepEqual(resolveLimits({ memory: '1G', pids: 64 }, ctx), {
    memory_bytes: 1024 * MiB,
    cpu: 1,
    pids: 64,
  });
});

test('bad limits are refused with the field and what is allowed', () => {
  refuses(
    () => resolveLimits({ memory: '128M' }, ctx),
    'limits.memory',
    /less than the guest's 256 MiB/,
  );
  refuses(() => resolveLimits({ memory: '1Z' }, ctx), 'limits.memory', /unknown unit/);
  refuses(() => resolveLimits({ cpu: 3 }, ctx), 'limits.cpu', /more than this host's 2 cores/);
  refuses(() => resolveLimits({ cpu: 0 }, ctx), 'limits.cpu', /at least 0.01/);
  refuses(() => resolveLimits({ cpu: -1 }, ctx), 'limits.cpu', /at least/);
  refuses(() => resolveLimits({ pids: 4 }, ctx), 'limits.pids', /from 32/);
  assert.equal(resolveLimits({ memory: '256M' }, ctx).memory_bytes, 256 * MiB, 'equal is enough');
});

test("each home's cgroups have their own parent", () => {
  assert.match(cgroupParentName('/var/lib/forkd'), /^forkd-[0-9a-f]{10}$/);
  assert.notEqual(cgroupParentName('/a'), cgroupParentName('/b'));
});
