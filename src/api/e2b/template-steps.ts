/**
 * E2B's template build request (the SDK's `Template()` builder as `TemplateBuildStartV2`:
 * fromImage/fromTemplate, steps RUN/COPY/ENV/WORKDIR/USER, startCmd, readyCmd, force) as
 * a forkd Dockerfile, so `forkd build` parses, plans, caches and runs it — nothing of the
 * build is done twice. A COPY names its uploaded archive by hash: the archive is unpacked
 * into the context under `<hash>/`, and the COPY reads from there. What has no Dockerfile
 * form in forkd (registry credentials, unknown step types) is refused here, naming it.
 * The E2B step a forkd step came from is kept, so a failure points at the SDK's step.
 */
import { ForkdError } from '../../errors.js';
import { bad, optString, type Body } from './control.js';

/** One step of the request as the SDK sends it. */
export interface E2bStep {
  type: string;
  args: string[];
  filesHash?: string;
  force: boolean;
}

/** The request: where the build starts, its steps, the start and ready commands. */
export interface E2bTemplateStart {
  fromImage?: string;
  fromTemplate?: string;
  steps: E2bStep[];
  startCmd?: string;
  readyCmd?: string;
  force: boolean;
}

/** What the listener hands to forkd's build service. */
export interface TranslatedBuild {
  dockerfile: string;
  /** The uploaded archives the COPY steps read, by hash. */
  hashes: string[];
  /** E2B's step name (`base`, `0`…`n-1` as SDK step indexes + 1, `finalize`) of a forkd step. */
  e2bStep: (forkdStep: number) => string;
  noCache: boolean;
  /** The first forkd step the SDK's `skipCache()` forced (1-based, after FROM). */
  noCacheFrom?: number;
}

const HASH = /^[0-9a-f]{64}$/;

function unsupported(what: string, hint: string): ForkdError {
  return new ForkdError('bad_request', `${what} is not supported by forkd's E2B listener: ${hint}`);
}

/** A file hash of the SDK (sha256 hex); anything else never names a stored file. */
export function checkHash(hash: string): string {
  if (!HASH.test(hash)) throw bad('hash', 'must be a sha256 in hex');
  return hash;
}

/** A Dockerfile line holds one line: a value with a newline cannot be written into one. */
function oneLine(field: string, v: string): string {
  if (/[\r\n]/.test(v)) throw bad(field, 'must not contain a newline');
  return v;
}

/** A double-quoted Dockerfile word: `"` and `\` escaped; `$V` expands, as in ENV. */
function quoted(s: string): string {
  return `"${oneLine('value', s).replace(/(["\\])/g, '\\$1')}"`;
}

/** `/bin/sh -c CMD` in the exec form: any command text survives, newlines too. */
const shell = (cmd: string): string => JSON.stringify(['/bin/sh', '-c', cmd]);

/** The ready command as forkd's wait: the SDK's own port and file checks map natively. */
function readiness(ready: string): string {
  const port = /^\[ -n "\$\(ss -Htuln sport = :(\d+)\)" \]$/.exec(ready);
  if (port) return `--wait-port=${port[1]}`;
  const file = /^\[ -f (?:'((?:[^']|'\\'')*)'|([^\s'"]+)) \]$/.exec(ready);
  if (file) {
    const path = file[1] !== undefined ? file[1].replace(/'\\''/g, "'") : (file[2] as string);
    return `--wait-file=${quoted(path)}`;
  }
  return `--wait-cmd=${quoted(ready)}`;
}

/** The Dockerfile lines of one E2B step; `user` is the USER in force before it. */
function stepLines(step: E2bStep, i: number, user: string): string[] {
  const field = `steps[${i}]`;
  const [a0, a1, a2, a3] = step.args;
  switch (step.type) {
    case 'RUN': {
      if (a0 === undefined) throw bad(field, 'RUN needs a command');
      const run = `RUN ${shell(a0)}`;
      if (!a1 || a1 === user) return [run];
      return [`USER ${oneLine(field, a1)}`, run, `USER ${user}`];
    }
    case 'COPY': {
      if (a0 === undefined || a1 === undefined) throw bad(field, 'COPY needs a source and a dest');
      const hash = checkHash(step.filesHash ?? '');
      const flags = [
        ...(a2 ? [`--chown=${oneLine(field, a2)}`] : []),
        ...(a3 ? [`--chmod=${a3}`] : []),
      ];
      const src = `${hash}/${a0.replace(/^(\.\/)+/, '')}`;
      return [
        [`COPY`, ...flags, JSON.stringify([oneLine(field, src), oneLine(field, a1)])].join(' '),
      ];
    }
    case 'ENV': {
      if (step.args.length === 0 || step.args.length % 2)
        throw bad(field, 'ENV takes KEY, VALUE pairs');
      const pairs: string[] = [];
      for (let k = 0; k < step.args.length; k += 2) {
        const key = step.args[k] as string;
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw bad(field, `"${key}" is not an env name`);
        pairs.push(`${key}=${quoted(step.args[k + 1] as string)}`);
      }
      return [`ENV ${pairs.join(' ')}`];
    }
    case 'WORKDIR':
    case 'USER':
      if (!a0) throw bad(field, `${step.type} needs a value`);
      return [`${step.type} ${oneLine(field, a0)}`];
    default:
      throw unsupported(
        `the template step ${step.type.slice(0, 40)}`,
        'steps are RUN, COPY, ENV, WORKDIR and USER (docs/e2b.md)',
      );
  }
}

/**
 * The request as a forkd Dockerfile. `baseUser` is the user the base runs steps as (the
 * snapshot's, else root): a RUN with its own user switches to it and back.
 */
export function translate(req: E2bTemplateStart, baseUser: string): TranslatedBuild {
  const from = req.fromTemplate ?? req.fromImage;
  if (!from) throw bad('fromImage', 'a template build needs fromImage or fromTemplate');
  const lines = [`FROM ${oneLine('from', from)}`];
  /** forkd step n (1-based after FROM) → the SDK's step name. */
  const origin: string[] = [];
  const hashes = new Set<string>();
  let user = baseUser;
  let noCacheFrom: number | undefined;
  req.steps.forEach((step, i) => {
    const more = stepLines(step, i, user);
    if (step.force && noCacheFrom === undefined) noCacheFrom = origin.length + 1;
    origin.push(...more.map(() => String(i + 1)));
    lines.push(...more);
    if (step.type === 'USER') user = step.args[0] as string;
    if (step.type === 'COPY') hashes.add(step.filesHash as string);
  });
  if (req.startCmd) {
    const wait = req.readyCmd ? `${readiness(req.readyCmd)} ` : '';
    lines.push(`# forkd:start ${wait}${shell(req.startCmd)}`);
    origin.push('finalize');
  } else if (req.readyCmd) {
    // A ready check alone: the build waits until it passes, as E2B's does.
    lines.push(`# forkd:start ${readiness(req.readyCmd)} ${shell('true')}`);
    origin.push('finalize');
  }
  return {
    dockerfile: `${lines.join('\n')}\n`,
    hashes: [...hashes],
    e2bStep: (n) => origin[n - 1] ?? 'base',
    noCache: req.force,
    ...(noCacheFrom !== undefined ? { noCacheFrom } : {}),
  };
}

function parseStep(v: unknown, i: number): E2bStep {
  const field = `steps[${i}]`;
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw bad(field, 'must be an object');
  const s = v as Body;
  if (typeof s.type !== 'string') throw bad(`${field}.type`, 'must be a string');
  const args = s.args ?? [];
  if (!Array.isArray(args) || !args.every((a) => typeof a === 'string')) {
    throw bad(`${field}.args`, 'must be an array of strings');
  }
  return {
    type: s.type,
    args: args as string[],
    ...(typeof s.filesHash === 'string' ? { filesHash: s.filesHash } : {}),
    force: s.force === true,
  };
}

/** The body of `POST /v2/templates/:id/builds/:build`, with E2B's cloud-only options refused. */
export function parseTemplateStart(body: Body): E2bTemplateStart {
  if (body.fromImageRegistry !== undefined && body.fromImageRegistry !== null) {
    throw unsupported(
      'fromImage with registry credentials (fromAWSRegistry, fromGCPRegistry, credentials)',
      'log the daemon in to the registry (`forkd login REGISTRY`) and use fromImage(ref) without them',
    );
  }
  const steps = body.steps ?? [];
  if (!Array.isArray(steps)) throw bad('steps', 'must be an array');
  const fromImage = optString(body, 'fromImage');
  const fromTemplate = optString(body, 'fromTemplate');
  const startCmd = optString(body, 'startCmd');
  const readyCmd = optString(body, 'readyCmd');
  return {
    ...(fromImage ? { fromImage } : {}),
    ...(fromTemplate ? { fromTemplate } : {}),
    steps: steps.map(parseStep),
    ...(startCmd ? { startCmd } : {}),
    ...(readyCmd ? { readyCmd } : {}),
    force: body.force === true,
  };
}
