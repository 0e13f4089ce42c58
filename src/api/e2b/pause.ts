/**
 * E2B's pause as its SDK sees it. forkd wakes a paused sandbox on any request; E2B does
 * not: after `pause()` the sandbox is paused until `connect()` (or resume) — its envd
 * answers 502 (`isRunning()` is false), and a sandbox created with auto-pause but without
 * auto-resume stays paused the same way once its idle time paused it. This gate holds those
 * sandboxes: an envd request to one that is paused is answered as E2B answers it, without
 * waking it. Held ids live in the listener's memory (a daemon restart forgets them: its
 * sandboxes then wake on any request, as forkd's own do).
 */
import type { FastifyRequest } from 'fastify';
import type { Services } from '../../services/contracts.js';
import type { Api } from '../types.js';
import { ConnectFailure } from './wire.js';

/** The label that marks a sandbox created without auto-resume (kept out of E2B metadata). */
export const NO_AUTO_RESUME = 'forkd.e2b.auto-resume';

export class PauseGate {
  /** Paused by E2B's pause(): held until connect/resume. */
  private readonly held = new Set<string>();
  /** Auto-pause without auto-resume: held whenever forkd's idle policy paused it. */
  private readonly manual = new Set<string>();

  constructor(private readonly services: Services) {}

  hold(id: string): void {
    this.held.add(id);
  }

  /** connect() or resume: requests reach it again. */
  release(id: string): void {
    this.held.delete(id);
  }

  connectOnly(id: string): void {
    this.manual.add(id);
  }

  /** Whether a request to `id` must not wake it: held, and paused right now. */
  async refuses(id: string): Promise<boolean> {
    if (!this.held.has(id) && !this.manual.has(id)) return false;
    const s = await this.services.sandboxes.get(id).catch(() => undefined);
    const alive = s?.state === 'running' || s?.state === 'starting';
    if (!alive) {
      this.forget(id);
      return false;
    }
    return s?.tier !== 'running';
  }

  forget(id: string): void {
    this.held.delete(id);
    this.manual.delete(id);
  }
}

const PAUSED = 'the sandbox is paused: resume it with Sandbox.connect()';

/**
 * Answer envd requests (REST, RPC, /health) to a held, paused sandbox before their route
 * would wake it: 502 as E2B's proxy answers for a sandbox that does not run, Connect's
 * `unavailable` on RPCs.
 */
export function installPauseGate(
  app: Api,
  gate: PauseGate,
  sandboxOf: (request: FastifyRequest) => string,
): void {
  app.addHook('preHandler', async (request, reply) => {
    const plane = request.routeOptions.config.plane;
    if (plane !== 'envd' && plane !== 'rpc' && plane !== 'public') return;
    let id: string;
    try {
      id = sandboxOf(request);
    } catch {
      return; // the route answers a request that names no sandbox
    }
    if (!(await gate.refuses(id))) return;
    if (plane === 'rpc') throw new ConnectFailure('unavailable', PAUSED);
    return reply.code(502).send({ code: 502, message: PAUSED });
  });
}
