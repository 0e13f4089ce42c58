/**
 * The requests a sandbox's static calls (`Sandbox.kill(id)`) and their instance twins
 * (`sbx.kill()`) share: one place per route, so both send the same thing.
 */
import type { CallOptions, Forkd } from './client.js';
import type { SandboxInfo } from './types.js';
import { sandboxFromWire, toSeconds } from './wire.js';

export function sandboxPath(id: string): string {
  return `/v1/sandboxes/${encodeURIComponent(id)}`;
}

export async function getInfo(client: Forkd, id: string, opts: CallOptions): Promise<SandboxInfo> {
  const wire = await client.transport.json({
    method: 'GET',
    path: sandboxPath(id),
    signal: opts.signal,
  });
  return sandboxFromWire(wire);
}

/**
 * How a kill answers.
 *
 * @example
 * await sbx.kill({ wait: false }); // returns once the kill is under way
 */
export interface KillOptions extends CallOptions {
  /**
   * false: return once the daemon has started the kill (its VM, network and files go in
   * the background; the sandbox reads `stopped` when done). Default: return when all is gone.
   */
  wait?: boolean;
}

export async function deleteSandbox(client: Forkd, id: string, opts: KillOptions): Promise<void> {
  await client.transport.bytes({
    method: 'DELETE',
    path: sandboxPath(id),
    query: { wait: opts.wait === false ? false : undefined },
    signal: opts.signal,
  });
}

export async function patchTimeout(
  client: Forkd,
  id: string,
  timeoutMs: number,
  opts: CallOptions,
): Promise<SandboxInfo> {
  return patchSandbox(client, id, { timeout_s: toSeconds(timeoutMs) }, opts);
}

/** PATCH /v1/sandboxes/:id: the sandbox as it is afterwards. */
export async function patchSandbox(
  client: Forkd,
  id: string,
  json: Record<string, unknown>,
  opts: CallOptions,
): Promise<SandboxInfo> {
  const wire = await client.transport.json({
    method: 'PATCH',
    path: sandboxPath(id),
    json,
    signal: opts.signal,
  });
  return sandboxFromWire(wire);
}

/** POST /pause or /resume: the sandbox as it is afterwards. */
export async function tierMove(
  client: Forkd,
  id: string,
  verb: 'pause' | 'resume',
  opts: CallOptions,
  json?: Record<string, unknown>,
): Promise<SandboxInfo> {
  const wire = await client.transport.json({
    method: 'POST',
    path: `${sandboxPath(id)}/${verb}`,
    json,
    signal: opts.signal,
  });
  return sandboxFromWire(wire);
}

export async function consoleLog(client: Forkd, id: string, opts: CallOptions): Promise<string> {
  const bytes = await client.transport.bytes({
    method: 'GET',
    path: `${sandboxPath(id)}/logs`,
    signal: opts.signal,
  });
  return bytes.toString('utf8');
}
