/**
 * Which cache images expire (services/images/expiry.ts): only images made as a cache entry,
 * none a sandbox is starting or running from (in any tier), and only once their last use —
 * their creation or the last change of one of their sandboxes — is the cache time ago.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { expiredImages } from '../../../src/services/images/expiry.js';

const HOUR = 3600_000;
const NOW = Date.parse('2026-12-04T12:00:00Z');
const at = (hoursAgo: number) => new Date(NOW - hoursAgo * HOUR).toISOString();

const images = [
  { name: 'rootfs-old', created_at: at(48), cache: true as const },
  { name: 'rootfs-new', created_at: at(1), cache: true as const },
  { name: 'rootfs-running', created_at: at(48), cache: true as const },
  { name: 'rootfs-ended-lately', created_at: at(48), cache: true as const },
  { name: 'app', created_at: at(48) },
];
const rows = [
  { image: 'rootfs-running', state: 'running' as const, updated_at: at(30) },
  { image: 'rootfs-ended-lately', state: 'stopped' as const, updated_at: at(2) },
  { image: 'rootfs-old', state: 'dead' as const, updated_at: at(40) },
];

test('a cache image unused for the cache time expires; one in use, made or used lately, or not a cache stays', () => {
  assert.deepEqual(expiredImages(images, rows, 24 * HOUR, NOW), ['rootfs-old']);
});

test('a cache time of 0 (image prune) takes every cache image no sandbox uses now', () => {
  assert.deepEqual(expiredImages(images, rows, 0, NOW), [
    'rootfs-old',
    'rootfs-new',
    'rootfs-ended-lately',
  ]);
  const starting = [{ image: 'rootfs-new', state: 'starting' as const, updated_at: at(0) }];
  assert.ok(!expiredImages(images, starting, 0, NOW).includes('rootfs-new'));
});
