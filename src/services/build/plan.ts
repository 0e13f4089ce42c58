/**
 * A parsed Dockerfile as the steps a build runs: variables expanded (`$V`, `${V}`,
 * `${V:-word}`, `${V:+word}`) where Docker expands them, ARG and ENV tracked in order, and
 * the state each step runs with (env, workdir, user). Steps that change the guest (RUN,
 * COPY, ADD, forkd:start) are VM steps; the others only change the state or the final
 * config. No I/O: a plan made with the base image's config is the one the build runs, a
 * plan made with none checks a Dockerfile before anything is pulled or booted.
 */
import type { BuildConfig } from '../contracts.js';
import { lineError, type CommandForm, type Instruction, type Readiness } from './dockerfile.js';

export type { BuildConfig };

/** What a VM step does in the guest. */
export type Action =
  | { kind: 'run'; argv: string[] }
  | { kind: 'copy'; sources: string[]; dest: string; add: boolean; chown?: string; chmod?: number }
  | { kind: 'start'; argv: string[]; ready: Readiness; timeoutS: number }
  | { kind: 'publish'; tag: string };

export interface Step {
  /** 1-based, over the instructions after FROM (what `--no-cache-from` names). */
  n: number;
  line: number;
  text: string;
  /** Absent for a step that only changes the state or the config. */
  action?: Action;
  /** The environment of its command: ENV over the ARGs in scope. */
  env: Record<string, string>;
  workdir: string;
  user?: string;
  /** The step's part of the cache key: everything it does, expanded. */
  material: string;
  /** The config as it stands after this step. */
  config: BuildConfig;
}

export interface Plan {
  /** FROM's reference, expanded with the ARGs before it. */
  from: string;
  fromLine: number;
  steps: Step[];
  config: BuildConfig;
  /** Build args given that no ARG declares (Docker warns about them too). */
  unusedArgs: string[];
}

/** The state a build starts from: the base image's config (or nothing). */
export interface BaseConfig {
  env?: Record<string, string>;
  working_dir?: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
}

export function makePlan(
  instructions: Instruction[],
  buildArgs: Record<string, string>,
  base: BaseConfig = {},
): Plan {
  const args: Record<string, string> = {};
  const declared = new Set<string>();
  const arg = (i: Extract<Instruction, { kind: 'ARG' }>) => {
    declared.add(i.name);
    const v = buildArgs[i.name] ?? (i.value !== undefined ? expand(i.value, args, i) : undefined);
    if (v !== undefined) args[i.name] = v;
  };
  const fromAt = instructions.findIndex((i) => i.kind === 'FROM');
  for (const i of instructions.slice(0, fromAt)) if (i.kind === 'ARG') arg(i);
  const fromIns = instructions[fromAt] as Extract<Instruction, { kind: 'FROM' }>;
  const from = expand(fromIns.ref, args, fromIns);
  // ARGs before FROM are for FROM only, unless declared again after it (Docker's rule).
  for (const k of Object.keys(args)) delete args[k];
  const config: BuildConfig = {
    env: { ...(base.env ?? {}) },
    ...(base.working_dir ? { working_dir: base.working_dir } : {}),
    ...(base.user ? { user: base.user } : {}),
    ...(base.entrypoint ? { entrypoint: base.entrypoint } : {}),
    ...(base.cmd ? { cmd: base.cmd } : {}),
    ports: [],
    labels: {},
  };
  const steps: Step[] = [];
  for (const [k, i] of instructions.slice(fromAt + 1).entries()) {
    if (i.kind === 'ARG') arg(i);
    const vars = { ...args, ...config.env };
    const action = apply(i, vars, config);
    const env = { ...args, ...config.env };
    const workdir = config.working_dir || '/';
    const state = { env, workdir, user: config.user };
    steps.push({
      n: k + 1,
      line: i.line,
      text: i.text,
      ...(action ? { action } : {}),
      ...state,
      material: JSON.stringify({ action, ...state }),
      config: cloneConfig(config),
    });
  }
  const unusedArgs = Object.keys(buildArgs).filter((k) => !declared.has(k));
  return { from, fromLine: fromIns.line, steps, config, unusedArgs };
}

function cloneConfig(c: BuildConfig): BuildConfig {
  return { ...c, env: { ...c.env }, labels: { ...c.labels }, ports: [...c.ports] };
}

/** One instruction: the state it changes, and what it does in the guest. */
function apply(i: Instruction, vars: Record<string, string>, c: BuildConfig): Action | undefined {
  const x = (s: string) => expand(s, vars, i);
  switch (i.kind) {
    case 'RUN':
      return { kind: 'run', argv: argvOf(i.command) };
    case 'COPY':
    case 'ADD':
      return {
        kind: 'copy',
        sources: i.sources.map(x),
        dest: resolvePath(c.working_dir || '/', x(i.dest), i.dest.endsWith('/')),
        add: i.kind === 'ADD',
        ...(i.chown !== undefined ? { chown: x(i.chown) } : {}),
        ...(i.chmod !== undefined ? { chmod: parseInt(i.chmod, 8) } : {}),
      };
    case 'START':
      return { kind: 'start', argv: argvOf(i.command), ready: i.ready, timeoutS: i.timeoutS };
    case 'SNAPSHOT':
      return { kind: 'publish', tag: i.tag };
    case 'ENV':
      for (const [k, v] of pairs(i.pairs, vars, i)) {
        c.env[k] = v;
        vars[k] = v; // a later pair of the same ENV does not see it (Docker), but close enough
      }
      return undefined;
    case 'LABEL':
      for (const [k, v] of pairs(i.pairs, vars, i)) c.labels[k] = v;
      return undefined;
    case 'WORKDIR':
      c.working_dir = resolvePath(c.working_dir || '/', x(i.value), false);
      return undefined;
    case 'USER':
      c.user = x(i.value);
      return undefined;
    case 'EXPOSE':
      for (const p of i.ports.map(x)) c.ports.push(exposedPort(p, i));
      return undefined;
    case 'CMD':
      c.cmd = argvOf(i.command);
      return undefined;
    case 'ENTRYPOINT':
      c.entrypoint = argvOf(i.command);
      delete c.cmd; // Docker: a new ENTRYPOINT resets a CMD inherited from the base
      return undefined;
    default:
      return undefined;
  }
}

function argvOf(c: CommandForm): string[] {
  return 'exec' in c ? c.exec : ['/bin/sh', '-c', c.shell];
}

function exposedPort(p: string, i: Instruction): number {
  const m = /^(\d+)(?:\/(tcp|udp))?$/.exec(p);
  const port = m ? Number(m[1]) : NaN;
  if (!(port >= 1 && port <= 65535)) {
    throw lineError(i.line, `EXPOSE takes PORT or PORT/tcp, not "${p}"`, i.text);
  }
  return port;
}

/** A guest path: absolute as given, else under the workdir; a trailing `/` kept. */
function resolvePath(workdir: string, p: string, dir: boolean): string {
  const abs = p.startsWith('/') ? p : `${workdir.replace(/\/$/, '')}/${p}`;
  const parts: string[] = [];
  for (const seg of abs.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') parts.pop();
    else parts.push(seg);
  }
  return `/${parts.join('/')}${dir && parts.length > 0 ? '/' : ''}`;
}

/** `K=V K2="a b"`: words split as a shell does (quotes, backslashes), each expanded. */
function pairs(text: string, vars: Record<string, string>, i: Instruction): [string, string][] {
  return words(text, i).map((w) => {
    const eq = w.indexOf('=');
    if (eq < 1) throw lineError(i.line, `${i.kind} takes KEY=VALUE pairs, not "${w}"`, i.text);
    return [w.slice(0, eq), expand(w.slice(eq + 1), vars, i, true)];
  });
}

/** Split on unquoted whitespace; quotes are removed, `$` inside single quotes escaped. */
function words(text: string, i: Instruction): string[] {
  const out: string[] = [];
  let cur = '';
  let inWord = false;
  let q: '"' | "'" | null = null;
  for (let k = 0; k < text.length; k++) {
    const ch = text[k] as string;
    if (q === "'") {
      if (ch === "'") q = null;
      else cur += ch === '$' || ch === '\\' ? `\\${ch}` : ch;
    } else if (ch === '\\' && k + 1 < text.length) {
      cur += `\\${text[++k]}`;
      inWord = true;
    } else if (q === '"') {
      if (ch === '"') q = null;
      else cur += ch;
    } else if (ch === '"' || ch === "'") {
      q = ch;
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) out.push(cur);
      cur = '';
      inWord = false;
    } else {
      cur += ch;
      inWord = true;
    }
  }
  if (q) throw lineError(i.line, `unterminated ${q} quote`, i.text);
  if (inWord) out.push(cur);
  return out;
}

/**
 * Expand `$V`, `${V}`, `${V:-word}`, `${V:+word}`; `\$` is a literal `$`. With `unescape`
 * every other backslash escape gives its character too (a word split by `words`).
 */
export function expand(
  s: string,
  vars: Record<string, string>,
  i?: Instruction,
  unescape = false,
): string {
  let out = '';
  for (let k = 0; k < s.length; k++) {
    const ch = s[k] as string;
    if (ch === '\\' && k + 1 < s.length) {
      const next = s[++k] as string;
      out += next === '$' || unescape ? next : `\\${next}`;
      continue;
    }
    if (ch !== '$') {
      out += ch;
      continue;
    }
    const braced = /^\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[-+])([^}]*))?\}/.exec(s.slice(k + 1));
    if (braced) {
      const v = vars[braced[1] as string];
      const op = braced[2];
      const word = braced[3] ?? '';
      if (op === ':-') out += v ? v : expand(word, vars, i);
      else if (op === ':+') out += v ? expand(word, vars, i) : '';
      else out += v ?? '';
      k += braced[0].length;
      continue;
    }
    const plain = /^[A-Za-z_][A-Za-z0-9_]*/.exec(s.slice(k + 1));
    if (plain) {
      out += vars[plain[0]] ?? '';
      k += plain[0].length;
      continue;
    }
    if (s[k + 1] === '{' && i)
      throw lineError(i.line, `bad variable substitution in "${s}"`, i.text);
    out += ch;
  }
  return out;
}
