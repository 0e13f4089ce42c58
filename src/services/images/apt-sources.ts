/**
 * Which Debian mirror to debootstrap from: the one the host's apt already uses, read from
 * its sources (deb822 `*.sources` and one-line `*.list`), so forkd never carries a mirror
 * host name of its own and follows whatever mirror or proxy the host is configured for.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';

/** One `deb` source: an archive URI and the suites taken from it. */
interface AptSource {
  uri: string;
  suites: string[];
}

/**
 * The mirror for `suite`: a `deb` source that lists the suite, else a Debian archive
 * (a URI whose path ends in /debian: such an archive carries every suite). Undefined when
 * the host has neither.
 */
export async function findAptMirror(
  suite: string,
  aptDir = '/etc/apt',
): Promise<string | undefined> {
  const sources = await readAptSources(aptDir);
  const exact = sources.find((s) => s.suites.includes(suite));
  const archive = sources.find((s) => /\/debian\/?$/.test(s.uri));
  return (exact ?? archive)?.uri;
}

async function readAptSources(aptDir: string): Promise<AptSource[]> {
  const listDir = join(aptDir, 'sources.list.d');
  const names = (await readdir(listDir).catch(() => [] as string[])).sort();
  const files = [
    { path: join(aptDir, 'sources.list'), deb822: false },
    ...names
      .filter((n) => n.endsWith('.list') || n.endsWith('.sources'))
      .map((n) => ({ path: join(listDir, n), deb822: n.endsWith('.sources') })),
  ];
  const parsed = await Promise.all(
    files.map(async (f) => {
      const text = await readFile(f.path, 'utf8').catch(() => '');
      return f.deb822 ? parseDeb822(text) : parseOneLine(text);
    }),
  );
  return parsed.flat();
}

/** `deb [options] URI suite [components…]` lines. */
export function parseOneLine(text: string): AptSource[] {
  return text.split('\n').flatMap((line) => {
    const m = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)/.exec(line.replace(/#.*/, ''));
    return m?.[1] && m[2] ? [{ uri: m[1], suites: [m[2]] }] : [];
  });
}

/** deb822 stanzas (blank-line separated) of `Types: deb`, unless `Enabled: no`. */
export function parseDeb822(text: string): AptSource[] {
  return text.split(/\n\s*\n/).flatMap((stanza) => {
    const fields = deb822Fields(stanza);
    const uri = fields.get('uris')?.split(/\s+/)[0];
    const types = fields.get('types')?.split(/\s+/) ?? [];
    if (!uri || !types.includes('deb') || fields.get('enabled') === 'no') return [];
    return [{ uri, suites: fields.get('suites')?.split(/\s+/) ?? [] }];
  });
}

/** Field name (lower-cased) → value, with continuation lines joined and comments dropped. */
function deb822Fields(stanza: string): Map<string, string> {
  const fields = new Map<string, string>();
  let last: string | undefined;
  for (const line of stanza.split('\n')) {
    if (line.startsWith('#')) continue;
    if (/^\s/.test(line) && last) {
      fields.set(last, `${fields.get(last) ?? ''} ${line.trim()}`.trim());
      continue;
    }
    const m = /^([A-Za-z0-9-]+):\s*(.*)$/.exec(line);
    if (!m?.[1]) continue;
    last = m[1].toLowerCase();
    fields.set(last, (m[2] ?? '').trim());
  }
  return fields;
}
