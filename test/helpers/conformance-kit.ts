/**
 * What the conformance cases (test/helpers/conformance*.ts) share: the subject they run
 * against, the caller, small readers, the catalog-error matcher, and the record of which
 * service methods the cases called (so a test can list the fake's methods without a case).
 */
import assert from 'node:assert/strict';
import type { Readable } from 'node:stream';
import { isForkdError } from '../../src/errors.js';
import type { Services } from '../../src/services/contracts.js';

export type { ExecStream, PtyEnd } from '../../src/services/contracts.js';

/** What a case needs: the services, an image to boot and a bootable snapshot of it. */
export interface Subject {
  services: Services;
  image: string;
  snapshot: string;
}

/** Registers one case (its name gets the subject's kind in front). */
export type Case = (name: string, fn: (s: Subject) => Promise<void>) => void;

export const caller = { principal: 'conformance' };
export const text = (b64: string) => Buffer.from(b64, 'base64').toString('utf8');

export async function bytesOf(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

export function rejectsWith(code: string) {
  return (e: unknown) => {
    assert.ok(isForkdError(e), `expected a catalog error ${code}, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    return true;
  };
}

/** `service.method` of every call a case made. */
export const exercised = new Set<string>();

/** The services with each call recorded in `exercised`. */
export function recording(services: Services): Services {
  const wrap = <T extends object>(name: string, impl: T): T =>
    new Proxy(impl, {
      get: (target, method) => {
        const fn = Reflect.get(target, method, target) as unknown;
        if (typeof fn !== 'function' || typeof method !== 'string') return fn;
        return (...args: unknown[]) => {
          exercised.add(`${name}.${method}`);
          return (fn as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
  const out: Record<string, unknown> = {};
  for (const [name, impl] of Object.entries(services)) {
    out[name] = impl && typeof impl === 'object' ? wrap(name, impl as object) : impl;
  }
  return out as unknown as Services;
}

/** `service.method` for every method an implementation of Services offers. */
export function methodsOf(services: Services): string[] {
  const names: string[] = [];
  for (const [name, impl] of Object.entries(services)) {
    if (!impl || typeof impl !== 'object') continue;
    const keys = new Set<string>(Object.keys(impl));
    for (
      let p = Object.getPrototypeOf(impl);
      p && p !== Object.prototype;
      p = Object.getPrototypeOf(p)
    ) {
      for (const k of Object.getOwnPropertyNames(p)) if (k !== 'constructor') keys.add(k);
    }
    for (const k of keys) {
      if (typeof (impl as Record<string, unknown>)[k] === 'function') names.push(`${name}.${k}`);
    }
  }
  return names.sort();
}
