/**
 * The Dockerfile parser of `forkd build` (docs/build.md): lines joined at a trailing `\`,
 * comments dropped except forkd's own directives (`# forkd:start`, `# forkd:snapshot`),
 * each instruction checked with its flags. Everything a build can refuse is refused here,
 * naming the line, before any VM starts. No I/O: the plan (plan.ts) expands variables.
 */
import { ForkdError } from '../../errors.js';

/** Where the command of RUN, CMD, ENTRYPOINT and forkd:start comes from. */
export type CommandForm = { exec: string[] } | { shell: string };

/** How `# forkd:start` knows its process is ready. */
export type Readiness =
  | { kind: 'port'; port: number }
  | { kind: 'file'; path: string }
  | { kind: 'cmd'; cmd: string }
  | { kind: 'none' };

interface Base {
  /** 1-based line of the instruction's first line. */
  line: number;
  /** The instruction as written (continuations joined), for messages and the cache key. */
  text: string;
}

export type Instruction = Base &
  (
    | { kind: 'FROM'; ref: string }
    | { kind: 'RUN'; command: CommandForm }
    | { kind: 'COPY' | 'ADD'; sources: string[]; dest: string; chown?: string; chmod?: string }
    | { kind: 'ENV' | 'LABEL'; pairs: string }
    | { kind: 'ARG'; name: string; value?: string }
    | { kind: 'WORKDIR' | 'USER'; value: string }
    | { kind: 'EXPOSE'; ports: string[] }
    | { kind: 'CMD' | 'ENTRYPOINT'; command: CommandForm }
    | { kind: 'START'; command: CommandForm; ready: Readiness; timeoutS: number }
    | { kind: 'SNAPSHOT'; tag: string }
  );

export type InstructionKind = Instruction['kind'];

/** Instructions Docker knows that a forkd build cannot honour, and why. */
const REFUSED: Record<string, string> = {
  VOLUME: 'a forkd snapshot keeps its whole disk: drop VOLUME',
  HEALTHCHECK: 'use `# forkd:start --wait-cmd CMD` for a readiness check',
  ONBUILD: 'ONBUILD triggers are not supported',
  STOPSIGNAL: 'STOPSIGNAL is not supported',
  SHELL: 'SHELL is not supported: RUN uses /bin/sh -c (use the exec form for another shell)',
  MAINTAINER: 'MAINTAINER is deprecated: use LABEL maintainer=…',
};

const DEFAULT_START_TIMEOUT_S = 120;
const MAX_START_TIMEOUT_S = 3600;

/** Parse a whole Dockerfile; the first problem is a `bad_request` naming its line. */
export function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  for (const raw of logicalLines(text)) {
    const ins = parseLine(raw.line, raw.text);
    if (ins) out.push(ins);
  }
  checkOrder(out);
  return out;
}

/** A Dockerfile problem at `line`, as every layer reports it. */
export function lineError(line: number, message: string, text?: string): ForkdError {
  return new ForkdError('bad_request', `Dockerfile line ${line}: ${message}`, {
    field: 'dockerfile',
    line,
    ...(text !== undefined ? { instruction: text } : {}),
  });
}

interface RawLine {
  line: number;
  text: string;
}

/** Physical lines joined at `\`; comments inside a continuation are skipped, as Docker does. */
function logicalLines(text: string): RawLine[] {
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  const out: RawLine[] = [];
  let cur: RawLine | undefined;
  for (const [i, physical] of lines.entries()) {
    const trimmed = physical.trim();
    if (cur && (trimmed.startsWith('#') || trimmed === '')) continue;
    if (!cur && trimmed.startsWith('#')) {
      out.push({ line: i + 1, text: trimmed });
      continue;
    }
    const continued = /\\\s*$/.test(physical);
    const piece = continued ? physical.replace(/\\\s*$/, '') : physical;
    if (cur) cur.text += piece;
    else cur = { line: i + 1, text: piece };
    if (!continued) {
      if (cur.text.trim()) out.push({ line: cur.line, text: cur.text.trim() });
      cur = undefined;
    }
  }
  if (cur?.text.trim()) out.push({ line: cur.line, text: cur.text.trim() });
  return out;
}

function parseLine(line: number, text: string): Instruction | null {
  if (text.startsWith('#')) return parseComment(line, text);
  const m = /^(\S+)\s*(.*)$/s.exec(text) as RegExpExecArray;
  const word = (m[1] as string).toUpperCase();
  const rest = (m[2] as string).trim();
  const fail = (msg: string) => lineError(line, msg, text);
  if (REFUSED[word]) throw fail(`${word}: ${REFUSED[word]}`);
  const base = { line, text };
  const { flags, args } = splitFlags(rest);
  const allow = (...names: string[]) => {
    for (const f of Object.keys(flags)) {
      if (!names.includes(f)) throw fail(`${word} does not take the flag --${f}`);
    }
  };
  const need = () => {
    if (!args) throw fail(`${word} needs an argument`);
  };
  switch (word) {
    case 'FROM': {
      allow();
      need();
      const parts = args.split(/\s+/);
      if (parts.length === 3 && parts[1]?.toUpperCase() === 'AS') {
        throw fail('multi-stage builds (FROM … AS name) are not supported: one FROM per file');
      }
      if (parts.length !== 1) throw fail('FROM takes one image or snapshot reference');
      if (parts[0] === 'scratch') {
        throw fail('FROM scratch has no shell for the forkd agent to run steps in');
      }
      return { ...base, kind: 'FROM', ref: parts[0] as string };
    }
    case 'RUN':
      allow();
      need();
      return { ...base, kind: 'RUN', command: commandForm(args, fail) };
    case 'CMD':
    case 'ENTRYPOINT':
      allow();
      need();
      return { ...base, kind: word, command: commandForm(args, fail) };
    case 'COPY':
    case 'ADD': {
      allow('chown', 'chmod', ...(word === 'COPY' ? ['from'] : []));
      if (flags.from !== undefined) throw fail('COPY --from (multi-stage) is not supported');
      need();
      const words = args.startsWith('[') ? jsonArray(args, fail) : args.split(/\s+/);
      if (words.length < 2) throw fail(`${word} needs a source and a destination`);
      const sources = words.slice(0, -1);
      for (const s of sources) {
        if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s)) {
          throw fail(
            `${word} ${s}: remote URLs are not fetched by forkd build; download the file into the build context and ${word} it from there`,
          );
        }
      }
      if (flags.chmod !== undefined && !/^[0-7]{3,4}$/.test(flags.chmod)) {
        throw fail(`--chmod takes an octal mode such as 0755, not "${flags.chmod}"`);
      }
      return {
        ...base,
        kind: word,
        sources,
        dest: words[words.length - 1] as string,
        ...(flags.chown !== undefined ? { chown: flags.chown } : {}),
        ...(flags.chmod !== undefined ? { chmod: flags.chmod } : {}),
      };
    }
    case 'ENV':
    case 'LABEL':
      allow();
      need();
      if (word === 'ENV' && !args.includes('=')) {
        // The legacy `ENV KEY value` form: one variable, the rest is its value.
        const [k, ...v] = args.split(/\s+/);
        return { ...base, kind: 'ENV', pairs: `${k}=${quote(v.join(' '))}` };
      }
      return { ...base, kind: word, pairs: args };
    case 'ARG': {
      allow();
      need();
      const am = /^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$/s.exec(args);
      if (!am) throw fail('ARG takes NAME or NAME=default');
      return {
        ...base,
        kind: 'ARG',
        name: am[1] as string,
        ...(am[2] !== undefined ? { value: am[2] } : {}),
      };
    }
    case 'WORKDIR':
    case 'USER':
      allow();
      need();
      return { ...base, kind: word, value: args };
    case 'EXPOSE':
      allow();
      need();
      return { ...base, kind: 'EXPOSE', ports: args.split(/\s+/) };
    default:
      throw fail(`unknown instruction ${m[1]}`);
  }
}

/** `# forkd:start …`, `# forkd:snapshot …`; other comments (and `# syntax=`) are nothing. */
function parseComment(line: number, text: string): Instruction | null {
  const m = /^#\s*forkd:(\S*)\s*(.*)$/s.exec(text);
  if (!m) return null;
  const fail = (msg: string) => lineError(line, msg, text);
  const { flags, args } = splitFlags((m[2] as string).trim());
  const base = { line, text };
  if (m[1] === 'snapshot') {
    for (const f of Object.keys(flags)) throw fail(`forkd:snapshot does not take --${f}`);
    if (!/^[a-z0-9][a-z0-9._-]{0,62}$/.test(args)) {
      throw fail(`forkd:snapshot takes the tag to publish the build's state under, not "${args}"`);
    }
    return { ...base, kind: 'SNAPSHOT', tag: args };
  }
  if (m[1] !== 'start') {
    throw fail(`unknown forkd directive forkd:${m[1]} (known: forkd:start, forkd:snapshot)`);
  }
  if (!args) throw fail('forkd:start needs the command to start');
  const ready = readiness(flags, fail);
  const timeout = flags.timeout ?? String(DEFAULT_START_TIMEOUT_S);
  const timeoutS = Number(timeout);
  if (!Number.isInteger(timeoutS) || timeoutS < 1 || timeoutS > MAX_START_TIMEOUT_S) {
    throw fail(`--timeout takes whole seconds from 1 to ${MAX_START_TIMEOUT_S}, not "${timeout}"`);
  }
  return { ...base, kind: 'START', command: commandForm(args, fail), ready, timeoutS };
}

function readiness(flags: Record<string, string>, fail: (m: string) => Error): Readiness {
  const known = ['wait-port', 'wait-file', 'wait-cmd', 'timeout'];
  for (const f of Object.keys(flags)) {
    if (!known.includes(f)) {
      throw fail(
        `forkd:start does not take --${f} (known: ${known.map((k) => `--${k}`).join(', ')})`,
      );
    }
  }
  const given = known.slice(0, 3).filter((k) => flags[k] !== undefined);
  if (given.length > 1) throw fail('forkd:start takes one of --wait-port, --wait-file, --wait-cmd');
  if (flags['wait-port'] !== undefined) {
    const port = Number(flags['wait-port']);
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw fail(`--wait-port takes a port from 1 to 65535, not "${flags['wait-port']}"`);
    }
    return { kind: 'port', port };
  }
  if (flags['wait-file'] !== undefined) return { kind: 'file', path: flags['wait-file'] };
  if (flags['wait-cmd'] !== undefined) return { kind: 'cmd', cmd: flags['wait-cmd'] };
  return { kind: 'none' };
}

/**
 * Leading `--name=value` flags (a quoted value may hold spaces: `--wait-cmd="curl -f x"`),
 * then the arguments.
 */
function splitFlags(rest: string): { flags: Record<string, string>; args: string } {
  const flags: Record<string, string> = {};
  let s = rest;
  for (;;) {
    const m = /^--([a-z][a-z-]*)(?:=("(?:[^"\\]|\\.)*"|'[^']*'|\S*))?(?:\s+|$)/.exec(s);
    if (!m) break;
    const v = m[2] ?? '';
    flags[m[1] as string] = /^["']/.test(v) ? v.slice(1, -1).replace(/\\(.)/g, '$1') : v;
    s = s.slice(m[0].length);
  }
  return { flags, args: s.trim() };
}

/** `["a","b"]` is the exec form; anything else runs with `/bin/sh -c`. */
function commandForm(args: string, fail: (m: string) => Error): CommandForm {
  if (!args.startsWith('[')) return { shell: args };
  const argv = jsonArray(args, fail);
  if (argv.length === 0) throw fail('the exec form needs at least the program');
  return { exec: argv };
}

function jsonArray(args: string, fail: (m: string) => Error): string[] {
  let v: unknown;
  try {
    v = JSON.parse(args);
  } catch {
    throw fail(
      'the exec form must be a JSON array of strings, e.g. ["python3", "-m", "http.server"]',
    );
  }
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) {
    throw fail('the exec form must be a JSON array of strings');
  }
  return v as string[];
}

function quote(s: string): string {
  return `"${s.replace(/(["\\$])/g, '\\$1')}"`;
}

/** One FROM, first (only ARGs before it); at most one CMD/ENTRYPOINT matters, Docker's rule. */
function checkOrder(ins: Instruction[]): void {
  const from = ins.filter((i) => i.kind === 'FROM');
  if (from.length === 0) throw lineError(1, 'the Dockerfile has no FROM');
  if (from.length > 1) {
    const second = from[1] as Instruction;
    throw lineError(
      second.line,
      'multi-stage builds are not supported: one FROM per file',
      second.text,
    );
  }
  const before = ins.slice(0, ins.indexOf(from[0] as Instruction));
  const bad = before.find((i) => i.kind !== 'ARG');
  if (bad) throw lineError(bad.line, `${bad.kind} before FROM (only ARG may come first)`, bad.text);
}
