/**
 * One good request per route of the REST contract, against the fake services' seeded state
 * (fake-services.ts `SEED`): the route table the bad-input, auth, audit, fuzz and OpenAPI
 * tests walk, and the inject options that send one.
 */
import type { InjectOptions } from 'fastify';
import { SEED_CONTEXT } from './fake-contexts.js';
import { SEED } from './fake-services.js';

/** One good request for a route, against the seeded state. */
export interface RouteRequest {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** The route pattern, as the app registers it. */
  route: string;
  url: string;
  /** A JSON body. */
  body?: Record<string, unknown>;
  /** A raw application/octet-stream body. */
  raw?: Buffer;
  /** The status a good request gets. */
  status: number;
}

const S = `/v1/sandboxes/${SEED.sandbox}`;
const SNAP = `/v1/snapshots/${SEED.snapshot}`;
const EX = `${S}/execs/${SEED.exec}`;

/** One good request per route of the REST contract (the table in docs/api.md). */
export function validRequests(): RouteRequest[] {
  return [
    { method: 'GET', route: '/healthz', url: '/healthz', status: 200 },
    { method: 'GET', route: '/version', url: '/version', status: 200 },
    { method: 'GET', route: '/metrics', url: '/metrics', status: 200 },
    { method: 'GET', route: '/v1/openapi.json', url: '/v1/openapi.json', status: 200 },
    {
      method: 'POST',
      route: '/v1/sandboxes',
      url: '/v1/sandboxes',
      body: { image: SEED.image, memory_mib: 256, cpus: 1, labels: { team: 'a' }, timeout_s: 60 },
      status: 201,
    },
    { method: 'GET', route: '/v1/sandboxes', url: '/v1/sandboxes?state=running', status: 200 },
    { method: 'GET', route: '/v1/sandboxes/:id', url: S, status: 200 },
    { method: 'PATCH', route: '/v1/sandboxes/:id', url: S, body: { timeout_s: 60 }, status: 200 },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/exec',
      url: `${S}/exec`,
      body: { argv: ['echo', 'hi'], cwd: '/', timeout_ms: 1000 },
      status: 200,
    },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/contexts',
      url: `${S}/contexts`,
      body: { name: 'other', language: 'python', cwd: '/tmp', env: { A: '1' } },
      status: 201,
    },
    { method: 'GET', route: '/v1/sandboxes/:id/contexts', url: `${S}/contexts`, status: 200 },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/contexts/:name/restart',
      url: `${S}/contexts/${SEED_CONTEXT}/restart`,
      status: 200,
    },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/contexts/:name/interrupt',
      url: `${S}/contexts/${SEED_CONTEXT}/interrupt`,
      status: 204,
    },
    {
      method: 'DELETE',
      route: '/v1/sandboxes/:id/contexts/:name',
      url: `${S}/contexts/${SEED_CONTEXT}`,
      status: 204,
    },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/eval',
      url: `${S}/eval`,
      body: { code: '1 + 1', context: SEED_CONTEXT, timeout_ms: 1000, stream: false },
      status: 200,
    },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/eval-fork',
      url: `${S}/eval-fork`,
      body: { variants: ['1', '2'], context: SEED_CONTEXT, timeout_ms: 1000, keep: false },
      status: 200,
    },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/execs/:exec_id/stdin',
      url: `${EX}/stdin?eof=true`,
      raw: Buffer.from('input'),
      status: 204,
    },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/execs/:exec_id/kill',
      url: `${EX}/kill`,
      body: { signal: 'SIGTERM' },
      status: 204,
    },
    {
      method: 'GET',
      route: '/v1/sandboxes/:id/files',
      url: `${S}/files?path=${SEED.file}`,
      status: 200,
    },
    {
      method: 'PUT',
      route: '/v1/sandboxes/:id/files',
      url: `${S}/files?path=/tmp/x&mode=420&parents=true`,
      raw: Buffer.from([0, 1, 2, 255]),
      status: 200,
    },
    {
      method: 'GET',
      route: '/v1/sandboxes/:id/files/stat',
      url: `${S}/files/stat?path=${SEED.file}`,
      status: 200,
    },
    {
      method: 'GET',
      route: '/v1/sandboxes/:id/files/list',
      url: `${S}/files/list?path=/etc`,
      status: 200,
    },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/files/mkdir',
      url: `${S}/files/mkdir`,
      body: { path: '/tmp/d', parents: true, mode: 493 },
      status: 204,
    },
    {
      method: 'DELETE',
      route: '/v1/sandboxes/:id/files',
      url: `${S}/files?path=${SEED.file}&recursive=false`,
      status: 204,
    },
    { method: 'GET', route: '/v1/sandboxes/:id/logs', url: `${S}/logs`, status: 200 },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/pause',
      url: `${S}/pause`,
      body: { tier: 'paused' },
      status: 200,
    },
    { method: 'POST', route: '/v1/sandboxes/:id/resume', url: `${S}/resume`, status: 200 },
    { method: 'GET', route: '/v1/sandboxes/:id/network', url: `${S}/network`, status: 200 },
    {
      method: 'PATCH',
      route: '/v1/sandboxes/:id/network',
      url: `${S}/network`,
      body: { egress: { allow_out: ['pypi.org'] } },
      status: 200,
    },
    { method: 'GET', route: '/v1/sandboxes/:id/ports', url: `${S}/ports`, status: 200 },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/ports',
      url: `${S}/ports`,
      body: { port: 8080 },
      status: 201,
    },
    {
      method: 'DELETE',
      route: '/v1/sandboxes/:id/ports/:port',
      url: `${S}/ports/8080`,
      status: 204,
    },
    ...(['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const).map((method) => ({
      method,
      route: '/v1/sandboxes/:id/ports/:port/*',
      url: `${S}/ports/8080/index.html`,
      status: 200,
    })),
    // inject() cannot upgrade: past auth and validation, a WebSocket route refuses a plain
    // GET (before any service call); test/api/pty.test.ts covers the upgraded session.
    {
      method: 'GET',
      route: '/v1/sandboxes/:id/pty',
      url: `${S}/pty?cols=80&rows=24&cmd=sh`,
      status: 400,
    },
    { method: 'GET', route: '/v1/images', url: '/v1/images', status: 200 },
    { method: 'GET', route: '/v1/events', url: '/v1/events?timeout_s=0', status: 200 },
    { method: 'GET', route: '/v1/doctor', url: '/v1/doctor', status: 200 },
    { method: 'GET', route: '/v1/bench', url: '/v1/bench', status: 200 },
    {
      method: 'POST',
      route: '/v1/images',
      url: '/v1/images',
      body: { name: 'tools', from_dir: '/srv/tools', size_mib: 64 },
      status: 201,
    },
    { method: 'DELETE', route: '/v1/images/:name', url: `/v1/images/${SEED.image}`, status: 204 },
    { method: 'GET', route: '/v1/images/:name', url: `/v1/images/${SEED.image}`, status: 200 },
    {
      method: 'POST',
      route: '/v1/images/pull',
      url: '/v1/images/pull',
      body: { reference: '127.0.0.1:5000/app:1', name: 'app' },
      status: 201,
    },
    {
      method: 'POST',
      route: '/v1/images/import',
      url: '/v1/images/import',
      body: { path: '/srv/app.tar', name: 'imported' },
      status: 201,
    },
    {
      method: 'POST',
      route: '/v1/images/:name/boot-snapshot',
      url: `/v1/images/${SEED.image}/boot-snapshot`,
      body: { memory_mib: 256 },
      status: 201,
    },
    { method: 'POST', route: '/v1/images/prune', url: '/v1/images/prune', status: 200 },
    {
      method: 'POST',
      route: '/v1/logins',
      url: '/v1/logins',
      body: { registry: '127.0.0.1:5000', username: 'u', password: 'secret' },
      status: 204,
    },
    {
      method: 'DELETE',
      route: '/v1/logins/:registry',
      url: '/v1/logins/127.0.0.1:5000',
      status: 204,
    },
    {
      method: 'POST',
      route: '/v1/snapshots',
      url: '/v1/snapshots',
      body: {
        tag: 'fresh',
        image: SEED.image,
        memory_mib: 256,
        cpus: 1,
        env: { A: '1' },
        warm: ['echo warm'],
        start: ['sleep 1000'],
        wait_for: 'true',
        wait_timeout_s: 30,
        labels: { team: 'a' },
        stream: false,
      },
      status: 201,
    },
    { method: 'GET', route: '/v1/snapshots', url: '/v1/snapshots', status: 200 },
    { method: 'GET', route: '/v1/snapshots/:tag', url: SNAP, status: 200 },
    { method: 'POST', route: '/v1/snapshots/:tag/verify', url: `${SNAP}/verify`, status: 200 },
    {
      method: 'PUT',
      route: '/v1/snapshots/:tag/pool',
      url: `${SNAP}/pool`,
      body: { size: 2 },
      status: 200,
    },
    {
      method: 'DELETE',
      route: '/v1/snapshots/:tag',
      url: `${SNAP}?force=true&cascade=true`,
      status: 204,
    },
    {
      method: 'POST',
      route: '/v1/sandboxes/:id/branch',
      url: `${S}/branch`,
      body: { tag: 'b1', fork: 2, labels: { team: 'a' }, no_wait: false },
      status: 201,
    },
    {
      method: 'POST',
      route: '/v1/snapshots/:tag/compact',
      url: `${SNAP}/compact`,
      body: { to: 'flat' },
      status: 201,
    },
    {
      method: 'POST',
      route: '/v1/snapshots/:tag/pack',
      url: `${SNAP}/pack`,
      body: { file: '/tmp/x.forkd.tar.zst' },
      status: 201,
    },
    {
      method: 'POST',
      route: '/v1/snapshots/unpack',
      url: '/v1/snapshots/unpack',
      body: { file: '/tmp/x.forkd.tar.zst', tag: 'unpacked-1' },
      status: 201,
    },
    {
      method: 'POST',
      route: '/v1/snapshots/:tag/push',
      url: `${SNAP}/push`,
      body: { reference: '127.0.0.1:5000/team/env:1' },
      status: 200,
    },
    {
      method: 'POST',
      route: '/v1/snapshots/pull',
      url: '/v1/snapshots/pull',
      body: { reference: '127.0.0.1:5000/team/env:1', tag: 'pulled-1' },
      status: 201,
    },
    { method: 'GET', route: '/v1/lineage', url: `/v1/lineage?tag=${SEED.snapshot}`, status: 200 },
    {
      method: 'POST',
      route: '/v1/builds',
      url: '/v1/builds?tag=built-1',
      raw: Buffer.from('tar'),
      status: 200,
    },
    { method: 'POST', route: '/v1/builds/prune', url: '/v1/builds/prune', status: 200 },
    { method: 'GET', route: '/v1/cache', url: '/v1/cache', status: 200 },
    {
      method: 'POST',
      route: '/v1/cache/prune',
      url: '/v1/cache/prune',
      body: { all: true },
      status: 200,
    },
    { method: 'DELETE', route: '/v1/sandboxes/:id', url: S, status: 204 },
  ];
}

/** Fastify inject options for `r`, with the right content type for its body. */
export function injectOptions(
  r: RouteRequest,
  headers: Record<string, string> = {},
): InjectOptions {
  if (r.raw) {
    return {
      method: r.method,
      url: r.url,
      payload: r.raw,
      headers: { 'content-type': 'application/octet-stream', ...headers },
    };
  }
  return { method: r.method, url: r.url, payload: r.body, headers };
}
