/** Parsing of CLI values shared by verbs: sizes like 256M/1G, K=V pairs. */
import { ForkdError } from '../errors.js';

/** "256M", "1G", "512" (MiB) → MiB. */
export function parseMemory(text: string): number {
  const m = /^(\d+)\s*([MmGg]i?[Bb]?)?$/.exec(text.trim());
  if (!m) throw new ForkdError('bad_request', `size "${text}" is not a size like 256M or 1G`);
  const n = Number(m[1]);
  return /^[Gg]/.test(m[2] ?? '') ? n * 1024 : n;
}

/** ["K=V", …] → {K: V}; a pair without "=" is an error naming it. */
export function parseEnv(pairs: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new ForkdError('bad_request', `--env "${pair}" is not KEY=VALUE`);
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return env;
}
