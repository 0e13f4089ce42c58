/**
 * The token file: one bearer token per line, `ID:TOKEN` (the id is what the audit log
 * records, never the token) or a bare `TOKEN` (id `token-N`, N its line). `#` starts a
 * comment. It must not be readable by group or others, like an ssh key.
 */
import { readFile, stat } from 'node:fs/promises';
import { ForkdError } from '../errors.js';

const MIN_TOKEN_LENGTH = 16;
const ID = /^[A-Za-z0-9._-]{1,64}$/;

/** token → id, from `path`. */
export async function loadTokens(path: string): Promise<Map<string, string>> {
  const info = await stat(path).catch(() => {
    throw new ForkdError('bad_request', `token file ${path} does not exist`);
  });
  if ((info.mode & 0o077) !== 0) {
    throw new ForkdError(
      'bad_request',
      `token file ${path} is readable by others (mode ${(info.mode & 0o777).toString(8)}): chmod 600 it`,
    );
  }
  return parseTokens(await readFile(path, 'utf8'), path);
}

export function parseTokens(text: string, source = 'the token file'): Map<string, string> {
  const tokens = new Map<string, string>();
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/#.*/, '').trim();
    if (!line) return;
    const colon = line.indexOf(':');
    const named = colon > 0 && ID.test(line.slice(0, colon));
    const id = named ? line.slice(0, colon) : `token-${i + 1}`;
    const token = named ? line.slice(colon + 1).trim() : line;
    if (token.length < MIN_TOKEN_LENGTH || /\s/.test(token)) {
      throw new ForkdError(
        'bad_request',
        `${source} line ${i + 1}: a token is at least ${MIN_TOKEN_LENGTH} characters with no spaces ` +
          '(make one with `openssl rand -hex 32`)',
      );
    }
    tokens.set(token, id);
  });
  if (tokens.size === 0) throw new ForkdError('bad_request', `${source} holds no token`);
  return tokens;
}
