/**
 * The build context on the daemon's host: `.dockerignore` (Docker's rules: `*`, `?`, `**`,
 * `!` exceptions, the last match wins, a matched directory excludes what is under it), the
 * files a COPY or ADD names (globs, directories, never outside the context), and their
 * digest, which is part of the step's cache key.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat, open, readdir, readFile, readlink } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { ForkdError } from '../../errors.js';

/** One thing to put in the guest. */
export interface CopyEntry {
  type: 'file' | 'dir' | 'symlink';
  /** On the host (files), absolute. */
  host: string;
  /** In the guest, absolute. */
  guest: string;
  mode: number;
  target?: string;
}

export interface Rule {
  re: RegExp;
  negate: boolean;
}

/** The context's `.dockerignore` rules (none without the file). */
export async function readIgnore(dir: string): Promise<Rule[]> {
  const text = await readFile(join(dir, '.dockerignore'), 'utf8').catch(() => '');
  const rules: Rule[] = [];
  for (const raw of text.split('\n')) {
    let line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const negate = line.startsWith('!');
    if (negate) line = line.slice(1).trim();
    const clean = posix.normalize(line).replace(/^\/+/, '').replace(/\/+$/, '');
    if (!clean || clean === '.') continue;
    rules.push({ re: globRegex(clean), negate });
  }
  return rules;
}

/** Whether a context-relative path is excluded (it or a directory above it matched). */
export function ignored(rules: Rule[], rel: string): boolean {
  let out = false;
  for (const r of rules) {
    const parts = rel.split('/');
    const hit = parts.some((_, k) => r.re.test(parts.slice(0, k + 1).join('/')));
    if (hit) out = !r.negate;
  }
  return out;
}

/** Go's filepath.Match with `**` for any number of directories, as Docker reads it. */
export function globRegex(pattern: string): RegExp {
  let re = '';
  for (let k = 0; k < pattern.length; k++) {
    const ch = pattern[k] as string;
    if (ch === '*' && pattern[k + 1] === '*') {
      const slash = pattern[k + 2] === '/';
      re += slash ? '(?:.*/)?' : '.*';
      k += slash ? 2 : 1;
    } else if (ch === '*') re += '[^/]*';
    else if (ch === '?') re += '[^/]';
    else if (ch === '[') {
      const end = pattern.indexOf(']', k);
      if (end < 0) re += '\\[';
      else {
        re += `[${pattern
          .slice(k + 1, end)
          .replace(/^!/, '^')
          .replace(/\\/g, '\\\\')}]`;
        k = end;
      }
    } else if (ch === '\\' && k + 1 < pattern.length) re += `\\${pattern[++k]}`;
    else re += ch.replace(/[.+^${}()|\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/**
 * The entries of one COPY/ADD: each source (a path or a glob, relative to the context)
 * under `dest` as Docker places it: a directory's contents go into dest; a file goes to
 * dest, or into it when dest ends with `/` or there are several sources.
 */
export async function resolveCopy(
  dir: string,
  rules: Rule[],
  sources: string[],
  dest: string,
  where: (msg: string) => Error,
): Promise<{ entries: CopyEntry[]; files: { source: string; host: string }[] }> {
  const matched: string[] = [];
  for (const s of sources) {
    const rel = posix.normalize(s).replace(/^\/+/, '').replace(/\/+$/, '') || '.';
    if (rel === '..' || rel.startsWith('../')) throw where(`${s} is outside the build context`);
    const hits = /[*?[]/.test(rel) ? await globContext(dir, rules, rel) : [rel];
    const kept = hits.filter((h) => h === '.' || !ignored(rules, h));
    if (kept.length === 0) {
      throw where(
        `${s}: no such file in the build context${hits.length ? ' (excluded by .dockerignore)' : ''}`,
      );
    }
    matched.push(...kept);
  }
  const intoDir = dest.endsWith('/') || matched.length > 1;
  const entries: CopyEntry[] = [];
  const files: { source: string; host: string }[] = [];
  for (const rel of matched) {
    const host = join(dir, rel);
    const st = await lstat(host).catch(() => null);
    if (!st) throw where(`${rel}: no such file in the build context`);
    if (st.isDirectory()) {
      const base = dest.replace(/\/$/, '') || '/';
      entries.push({ type: 'dir', host, guest: base, mode: st.mode & 0o7777 });
      await walk(dir, rules, rel, base, entries);
    } else {
      const guest = intoDir ? posix.join(dest, posix.basename(rel)) : dest;
      entries.push(await entryOf(host, guest));
    }
  }
  for (const e of entries) if (e.type === 'file') files.push({ source: e.guest, host: e.host });
  return { entries, files };
}

async function entryOf(host: string, guest: string): Promise<CopyEntry> {
  const st = await lstat(host);
  if (st.isSymbolicLink()) {
    return { type: 'symlink', host, guest, mode: 0o777, target: await readlink(host) };
  }
  if (st.isDirectory()) return { type: 'dir', host, guest, mode: st.mode & 0o7777 };
  return { type: 'file', host, guest, mode: st.mode & 0o7777 };
}

/** Everything under a context directory that `.dockerignore` keeps, parents first. */
async function walk(
  dir: string,
  rules: Rule[],
  rel: string,
  guest: string,
  out: CopyEntry[],
): Promise<void> {
  const names = (await readdir(join(dir, rel))).sort();
  for (const name of names) {
    const r = rel === '.' ? name : `${rel}/${name}`;
    if (ignored(rules, r)) continue;
    const e = await entryOf(join(dir, r), posix.join(guest, name));
    out.push(e);
    if (e.type === 'dir') await walk(dir, rules, r, e.guest, out);
  }
}

/** Context paths (relative) that a glob matches, at its depth. */
async function globContext(dir: string, rules: Rule[], pattern: string): Promise<string[]> {
  const re = globRegex(pattern);
  const depth = pattern.split('/').length;
  const out: string[] = [];
  const visit = async (rel: string, level: number): Promise<void> => {
    const names = await readdir(rel ? join(dir, rel) : dir).catch(() => [] as string[]);
    for (const name of names.sort()) {
      const r = rel ? `${rel}/${name}` : name;
      if (re.test(r)) out.push(r);
      if (level < depth && (await lstat(join(dir, r))).isDirectory()) await visit(r, level + 1);
    }
  };
  await visit('', 1);
  return out.filter((r) => !ignored(rules, r));
}

/**
 * The digest of what a COPY puts in the guest: each entry's guest path, type, mode and
 * content (a file's bytes, a link's target), in order. Any change there changes the key.
 */
export async function digestEntries(entries: CopyEntry[]): Promise<string> {
  const h = createHash('sha256');
  for (const e of entries) {
    h.update(`${e.type} ${e.guest} ${e.mode.toString(8)} ${e.target ?? ''}\n`);
    if (e.type === 'file') {
      for await (const chunk of createReadStream(e.host)) h.update(chunk as Buffer);
    }
  }
  return h.digest('hex');
}

/** Whether a context file is a tar archive ADD extracts (plain, gzip, bzip2, xz or zstd). */
export async function isArchive(path: string): Promise<boolean> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(262);
    const { bytesRead } = await fh.read(buf, 0, 262, 0);
    const head = buf.subarray(0, bytesRead);
    const magic = (hex: string) => head.subarray(0, hex.length / 2).equals(Buffer.from(hex, 'hex'));
    if (magic('1f8b') || magic('425a68') || magic('fd377a585a00') || magic('28b52ffd')) return true;
    return head.subarray(257, 262).toString('latin1') === 'ustar';
  } finally {
    await fh.close();
  }
}

/** The catalog error of a context problem at a Dockerfile line. */
export function contextError(line: number, text: string) {
  return (msg: string) =>
    new ForkdError('bad_request', `Dockerfile line ${line}: ${msg}`, {
      field: 'context',
      line,
      instruction: text,
    });
}
