/**
 * Where the daemon is and how to authenticate: explicit options, else FORKD_URL and
 * FORKD_TOKEN, else the daemon's default unix socket. The default is re-derived here (the
 * SDK never imports host code) and must match the daemon's: `$FORKD_HOME/run/forkd.sock`,
 * FORKD_HOME defaulting to /var/lib/forkd as root and ~/.local/share/forkd otherwise.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { BadRequestError, type ForkdError } from './errors.js';

/**
 * How to reach the daemon. Every SDK entry point accepts these fields.
 *
 * @example
 * const config: ClientConfig = { url: 'https://forkd.internal:7070', token: process.env.TOKEN };
 */
export interface ClientConfig {
  /** `http(s)://host:port` or `unix:/path/to.sock`; default FORKD_URL, else the local socket. */
  url?: string;
  /** Bearer token; default FORKD_TOKEN. */
  token?: string;
}

/**
 * A parsed daemon address.
 *
 * @example
 * const ep: Endpoint = parseUrl('http://127.0.0.1:7070'); // { kind: 'http', host, port: 7070, basePath: '' }
 */
export type Endpoint =
  | { kind: 'unix'; socketPath: string }
  | { kind: 'http' | 'https'; host: string; port: number; basePath: string };

/**
 * A config with the environment and defaults applied.
 *
 * @example
 * const { url, explicit } = resolveConfig();
 */
export interface ResolvedConfig {
  endpoint: Endpoint;
  token?: string;
  /** The address as a person writes it, for messages. */
  url: string;
  /** False when neither the options nor FORKD_URL named a daemon (the default socket). */
  explicit: boolean;
}

/**
 * The daemon's default socket: `$FORKD_HOME/run/forkd.sock`.
 *
 * @example
 * defaultSocketPath({ FORKD_HOME: '/srv/forkd' }); // '/srv/forkd/run/forkd.sock'
 */
export function defaultSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  const home =
    env.FORKD_HOME ||
    (process.getuid?.() === 0 ? '/var/lib/forkd' : join(homedir(), '.local', 'share', 'forkd'));
  return join(home, 'run', 'forkd.sock');
}

/**
 * Parse `http(s)://host:port[/prefix]` or `unix:/path`.
 *
 * @example
 * parseUrl('unix:/var/lib/forkd/run/forkd.sock'); // { kind: 'unix', socketPath: '/var/…' }
 */
export function parseUrl(url: string): Endpoint {
  if (url.startsWith('unix:')) {
    const socketPath = url.slice('unix:'.length).replace(/^\/\/(?=\/)/, '');
    if (socketPath) return { kind: 'unix', socketPath };
  } else if (/^https?:\/\//.test(url)) {
    const u = tryUrl(url);
    if (!u) throw badUrl(url, 'its host or port is not valid');
    const kind = u.protocol === 'https:' ? 'https' : 'http';
    return {
      kind,
      host: u.hostname.replace(/^\[|\]$/g, ''),
      port: u.port ? Number(u.port) : kind === 'https' ? 443 : 80,
      basePath: u.pathname.replace(/\/+$/, ''),
    };
  }
  throw badUrl(url, 'it is neither http(s)://host:port nor unix:/path/to.sock');
}

/** URL.canParse is newer than the Node 18 the SDK supports. */
function tryUrl(url: string): URL | undefined {
  try {
    return new URL(url);
  } catch {
    return undefined;
  }
}

function badUrl(url: string, reason: string): ForkdError {
  return new BadRequestError(`forkd URL "${url}" is not usable: ${reason}`, { url, reason });
}

/**
 * Apply FORKD_URL / FORKD_TOKEN and the default socket to a config.
 *
 * @example
 * resolveConfig({}).url; // 'unix:/var/lib/forkd/run/forkd.sock' as root with no FORKD_URL
 */
export function resolveConfig(
  config: ClientConfig = {},
  env: NodeJS.ProcessEnv = process.env,
): ResolvedConfig {
  const given = config.url || env.FORKD_URL;
  const url = given || `unix:${defaultSocketPath(env)}`;
  const token = config.token || env.FORKD_TOKEN || undefined;
  return { endpoint: parseUrl(url), token, url, explicit: Boolean(given) };
}
