/**
 * The E2B control plane (what the SDK reaches at E2B_API_URL): create (`POST /sandboxes`
 * of SDKs up to 2.49, `POST /v2/sandboxes` after), get, list, kill, set timeout, connect,
 * pause and resume. A template is a snapshot tag (the sandbox is forked) or else an image
 * (it boots); metadata are labels, envVars the sandbox's env, the network options its
 * egress policy. E2B's view of a sandbox is `running` or `paused`; a stopped one is gone.
 * E2B's auto-pause (`lifecycle.onTimeout: 'pause'`, body `autoPause`) is forkd's idle
 * policy: such a sandbox has no kill timeout and is paused its timeout after its last
 * request; E2B's timeout calls then move that time.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ForkdError, isForkdError } from '../../errors.js';
import { FORK_MAX } from '../../contract/rules.js';
import type { EgressPolicyT, IdlePolicyRequestT, SandboxT } from '../../contract/schemas.js';
import type { Caller } from '../../services/contracts.js';
import type { Api } from '../types.js';
import type { E2bContext } from './app.js';
import { metricsOf } from './metrics.js';
import { NO_AUTO_RESUME } from './pause.js';
import { e2bError, fromE2bId, toE2bId } from './wire.js';

/**
 * The envd version reported: ≥0.4.0 (no default user), 0.5.2 (close stdin), 0.5.7 (raw
 * uploads), 0.6.3 (watch events with entries), 0.6.4 (watching network mounts: the flag is
 * accepted, polling needs no inotify), 0.6.2's file metadata (user.e2b.* xattrs, filesystem.ts).
 */
export const ENVD_VERSION = '0.6.4';
/** The SDK's own default when a create names no timeout. */
const DEFAULT_TIMEOUT_S = 300;
/** Any tier below running (paused, hibernated or halted) is E2B's `paused`. */
const isPaused = (s: SandboxT): boolean => s.tier !== 'running';

export type Body = Record<string, unknown>;

export function bad(field: string, reason: string): ForkdError {
  return new ForkdError('bad_request', `${field}: ${reason}`, { field, reason });
}

export function bodyOf(request: FastifyRequest): Body {
  const b = request.body;
  if (b === undefined || b === null) return {};
  if (typeof b !== 'object' || Array.isArray(b)) throw bad('body', 'must be a JSON object');
  return b as Body;
}

export function optString(body: Body, field: string): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw bad(field, 'must be a string');
  return v;
}

function optTimeout(body: Body): number | undefined {
  const v = body.timeout;
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw bad('timeout', 'must be a whole number of seconds ≥ 1');
  }
  return v;
}

function optStringMap(body: Body, field: string): Record<string, string> | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  const ok =
    typeof v === 'object' &&
    !Array.isArray(v) &&
    Object.values(v as object).every((x) => typeof x === 'string');
  if (!ok) throw bad(field, 'must be an object of strings');
  return v as Record<string, string>;
}

function optStrings(body: Body, field: string): string[] | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) {
    throw bad(field, 'must be an array of strings');
  }
  return v as string[];
}

/** E2B options forkd has no counterpart for: refused when set, so nothing is silently lost. */
function refuseUnsupported(body: Body): void {
  const set = (v: unknown) =>
    v !== undefined && v !== null && v !== false && !(Array.isArray(v) && v.length === 0);
  // `mcp` is accepted: the SDK itself starts `mcp-gateway` in the sandbox after the create
  // (and kills the sandbox when that fails), so the server has nothing to do with it.
  for (const field of ['volumeMounts', 'iam']) {
    if (set(body[field])) throw bad(field, 'not supported by forkd (docs/e2b.md)');
  }
  const network = (body.network ?? {}) as Body;
  for (const field of ['rules', 'egressProxy', 'maskRequestHost', 'httpsPorts']) {
    if (set(network[field])) throw bad(`network.${field}`, 'not supported by forkd (docs/e2b.md)');
  }
  if (network.allowPublicTraffic === false) {
    throw bad('network.allowPublicTraffic', 'not supported by forkd: ports are not public');
  }
}

/** `allow_internet_access` and `network.allowOut/denyOut` → forkd's egress policy. */
export function egressOf(body: Body): EgressPolicyT | undefined {
  const internet = body.allow_internet_access;
  if (internet !== undefined && internet !== null && typeof internet !== 'boolean') {
    throw bad('allow_internet_access', 'must be a boolean');
  }
  const network = (body.network ?? {}) as Body;
  const allow = optStrings(network, 'allowOut');
  const deny = optStrings(network, 'denyOut');
  // E2B's "deny everything, allow a few" is denyOut 0.0.0.0/0: forkd says it as
  // allow_internet false (its deny list wins over its allow list).
  const denyAll = deny?.includes('0.0.0.0/0') ?? false;
  const denyRest = deny?.filter((d) => d !== '0.0.0.0/0');
  if (internet === false && !allow?.length) return 'none';
  const policy: Exclude<EgressPolicyT, 'none'> = {};
  if (internet === false || denyAll) policy.allow_internet = false;
  if (allow?.length) policy.allow_out = allow;
  if (denyRest?.length) policy.deny_out = denyRest;
  return Object.keys(policy).length ? policy : undefined;
}

/**
 * Whether a create asks for auto-pause (`autoPause`, with `autoPauseMemory` and
 * `autoResume` as the SDK sends `lifecycle`), and whether requests wake it (`resume`).
 * forkd keeps a paused sandbox's memory, so a pause without it is refused.
 */
function autoPauseOf(body: Body): { pause: boolean; resume: boolean } {
  const on = body.autoPause;
  if (on !== undefined && on !== null && typeof on !== 'boolean') {
    throw bad('autoPause', 'must be a boolean');
  }
  if (body.autoPauseMemory === false) {
    throw bad(
      'autoPauseMemory',
      'false is not supported by forkd: a paused sandbox keeps its memory',
    );
  }
  const resume = body.autoResume as { enabled?: unknown } | null | undefined;
  if (resume !== undefined && resume !== null && typeof resume.enabled !== 'boolean') {
    throw bad('autoResume', 'must be {enabled: true|false}');
  }
  if (resume?.enabled && on !== true) throw bad('autoResume', "only with onTimeout 'pause'");
  return { pause: on === true, resume: resume?.enabled !== false };
}

/**
 * Whether E2B sees it as auto-pausing: no kill timeout, a pause time of its own (what an
 * auto-pause create makes). Its E2B timeout is then its pause time.
 */
const autoPausing = (s: SandboxT): boolean =>
  s.expires_at === null && s.idle?.source === 'sandbox' && s.idle.pause_after_s !== null;

/** E2B's "set timeout": when it is paused (auto-pausing), else when it is killed. */
async function setTimeoutOf(ctx: E2bContext, s: SandboxT, timeoutS: number): Promise<SandboxT> {
  const { sandboxes } = ctx.services;
  return autoPausing(s)
    ? sandboxes.update(s.id, { idle: { pause_after_s: timeoutS } })
    : sandboxes.extend(s.id, timeoutS);
}

/** A create request in forkd's words. */
interface CreateCommand {
  template: string;
  /** Killed at its timeout; left out when it pauses instead (`idle`). */
  timeout_s?: number;
  idle?: IdlePolicyRequestT;
  labels?: Record<string, string>;
  env?: Record<string, string>;
  egress?: EgressPolicyT;
  /** Auto-pause without auto-resume: only connect() wakes it (pause.ts). */
  connectOnly?: boolean;
}

export function parseCreate(raw: Body): CreateCommand {
  const template = optString(raw, 'templateID');
  if (!template) throw bad('templateID', 'required: a snapshot tag or an image name');
  refuseUnsupported(raw);
  const timeout = optTimeout(raw) ?? DEFAULT_TIMEOUT_S;
  const auto = autoPauseOf(raw);
  const cmd: CreateCommand = auto.pause
    ? { template, idle: { pause_after_s: timeout } }
    : { template, timeout_s: timeout };
  let labels = optStringMap(raw, 'metadata');
  if (auto.pause && !auto.resume) {
    cmd.connectOnly = true;
    labels = { ...labels, [NO_AUTO_RESUME]: 'false' };
  }
  const env = optStringMap(raw, 'envVars');
  const egress = egressOf(raw);
  if (labels && Object.keys(labels).length) cmd.labels = labels;
  if (env && Object.keys(env).length) cmd.env = env;
  if (egress !== undefined) cmd.egress = egress;
  return cmd;
}

const codeOf = (e: unknown): string | undefined => (isForkdError(e) ? e.code : undefined);

/** Fork from the snapshot tagged `template`, or else boot the image of that name. */
async function createSandbox(ctx: E2bContext, cmd: CreateCommand, caller: Caller) {
  const s = await createFrom(ctx, cmd, caller);
  if (cmd.connectOnly) ctx.pauses.connectOnly(s.id);
  return s;
}

async function createFrom(ctx: E2bContext, cmd: CreateCommand, caller: Caller) {
  const { template, connectOnly, ...rest } = cmd;
  void connectOnly; // the listener's own (pause.ts), not forkd's
  try {
    const result = await ctx.services.snapshots.fork({ snapshot: template, n: 1, ...rest }, caller);
    const [child] = result.sandboxes;
    if (child) return child;
    throw result.failed[0]?.error ?? new Error('a fork of one reported no child');
  } catch (e) {
    if (codeOf(e) !== 'snapshot_not_found') throw e;
  }
  try {
    return await ctx.services.sandboxes.create({ image: template, ...rest }, caller);
  } catch (e) {
    if (codeOf(e) !== 'image_not_found') throw e;
    throw new ForkdError(
      'not_found',
      `template ${template.slice(0, 64)}: no snapshot tag or image of that name (see \`forkd snapshots\` and \`forkd images\`)`,
      { template },
    );
  }
}

/** The create/connect answer: what the SDK needs to reach the sandbox's envd. */
function sandboxBody(ctx: E2bContext, s: SandboxT) {
  return {
    sandboxID: toE2bId(s.id),
    templateID: s.snapshot ?? s.image ?? '',
    clientID: 'forkd',
    envdVersion: ENVD_VERSION,
    envdAccessToken: ctx.accessToken(s.id),
  };
}

/** Labels as E2B metadata: forkd's own (`forkd.*`, e.g. a fork's request id) stay out. */
const metadataOf = (labels: Record<string, string>): Record<string, string> =>
  Object.fromEntries(Object.entries(labels).filter(([k]) => !k.startsWith('forkd.')));

/** GET /sandboxes/:sandboxID and the list's entries. */
export function detailBody(s: SandboxT) {
  const template = s.snapshot ?? s.image ?? '';
  return {
    sandboxID: toE2bId(s.id),
    templateID: template,
    alias: template,
    clientID: 'forkd',
    startedAt: s.created_at,
    // No timeout: E2B has no such state, so a far end keeps the SDK's Date valid.
    endAt: s.expires_at ?? '9999-12-31T23:59:59.000Z',
    cpuCount: s.cpus,
    memoryMB: s.memory_mib,
    diskSizeMB: 0,
    metadata: metadataOf(s.labels),
    state: isPaused(s) ? 'paused' : 'running',
    envdVersion: ENVD_VERSION,
    lifecycle: autoPausing(s)
      ? { onTimeout: 'pause', autoResume: s.labels[NO_AUTO_RESUME] !== 'false' }
      : { onTimeout: 'kill', autoResume: false },
  };
}

const live = (s: SandboxT): boolean => s.state === 'running' || s.state === 'starting';

/** The sandbox of `:id` while it lives: E2B has no stopped sandboxes, only gone ones. */
async function liveSandbox(ctx: E2bContext, request: FastifyRequest): Promise<SandboxT> {
  const id = fromE2bId((request.params as { sandboxID: string }).sandboxID);
  request.auditTarget = id;
  const s = await ctx.services.sandboxes.get(id);
  if (!live(s)) {
    throw new ForkdError('sandbox_not_found', `sandbox ${toE2bId(id)} is ${s.state}`, { id });
  }
  return s;
}

/** `metadata` as the SDK sends it: `k=v&k2=v2`, each half URL-encoded. */
export function metadataFilter(raw: unknown): Record<string, string> {
  if (typeof raw !== 'string' || !raw) return {};
  return Object.fromEntries(new URLSearchParams(raw).entries());
}

/** `state=running,paused` (comma-joined or repeated) → the states asked for. */
function statesFilter(raw: unknown): Set<string> {
  const list = [raw].flat().filter((s): s is string => typeof s === 'string');
  const states = list.flatMap((s) => s.split(',')).filter(Boolean);
  return new Set(states.length ? states : ['running', 'paused']);
}

/** E2B's page size when a list names none, and the largest it takes. */
const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 1000;

type Listed = ReturnType<typeof detailBody>;

/** A page's continuation: where the last entry it held sorts (start time, then id). */
const tokenOf = (d: Listed): string =>
  Buffer.from(JSON.stringify([d.startedAt, d.sandboxID])).toString('base64url');

function afterToken(raw: unknown): [string, string] | undefined {
  if (raw === undefined || raw === '') return undefined;
  try {
    const v: unknown = JSON.parse(Buffer.from(String(raw), 'base64url').toString('utf8'));
    if (Array.isArray(v) && v.length === 2 && v.every((x) => typeof x === 'string')) {
      return v as [string, string];
    }
  } catch {
    // answered below
  }
  throw bad('nextToken', 'not a token this listener handed out (x-next-token)');
}

/** The list's query: filters, order and page. */
function listQuery(query: Record<string, unknown>) {
  const limit = query.limit === undefined ? DEFAULT_LIMIT : Number(query.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw bad('limit', `must be a whole number from 1 to ${MAX_LIMIT}`);
  }
  const order = query.order ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw bad('order', "must be 'asc' or 'desc'");
  const since =
    query.startedAfter === undefined ? undefined : Date.parse(String(query.startedAfter));
  if (since !== undefined && Number.isNaN(since)) {
    throw bad('startedAfter', 'must be an RFC 3339 time');
  }
  const template =
    typeof query.template === 'string' && query.template ? query.template : undefined;
  return { limit, order, since, template, after: afterToken(query.nextToken) };
}

/** Sort key of an entry: its start time, then its id (ties broken the same way every page). */
const compareListed = (a: Listed, b: Listed): number =>
  a.startedAt === b.startedAt
    ? a.sandboxID.localeCompare(b.sandboxID)
    : a.startedAt.localeCompare(b.startedAt);

/** GET /v2/sandboxes: filtered, ordered by start time (newest first unless `order=asc`), paged. */
async function list(ctx: E2bContext, request: FastifyRequest, reply: FastifyReply) {
  const query = request.query as Record<string, unknown>;
  const q = listQuery(query);
  const wanted = Object.entries(metadataFilter(query.metadata));
  const states = statesFilter(query.state);
  const sign = q.order === 'asc' ? 1 : -1;
  const all = (await ctx.services.sandboxes.list({}))
    .filter(live)
    .map(detailBody)
    .filter((d) => states.has(d.state))
    .filter((d) => wanted.every(([k, v]) => d.metadata[k] === v))
    .filter((d) => q.since === undefined || Date.parse(d.startedAt) >= q.since)
    .filter((d) => q.template === undefined || d.templateID === q.template)
    .sort((a, b) => sign * compareListed(a, b));
  const after = q.after;
  const rest = after
    ? all.filter(
        (d) => sign * compareListed(d, { startedAt: after[0], sandboxID: after[1] } as Listed) > 0,
      )
    : all;
  const page = rest.slice(0, q.limit);
  const last = page[page.length - 1];
  if (last && rest.length > page.length) reply.header('x-next-token', tokenOf(last));
  return page;
}

/**
 * Connect: wake a paused sandbox, set its timeout if asked; 201 when it was resumed. As
 * E2B's: one that `pause()` paused (its timeout held: no deadline) runs for the timeout
 * asked (the SDK sends 300 s by default); a running one's life (also one forkd's idle
 * policy paused unasked) is lengthened, never shortened.
 */
async function connect(ctx: E2bContext, request: FastifyRequest, reply: FastifyReply) {
  let s = await liveSandbox(ctx, request);
  const timeout = optTimeout(bodyOf(request));
  const resumed = isPaused(s);
  const held = resumed && s.expires_at === null;
  if (resumed) s = await ctx.services.sandboxes.resume(s.id);
  ctx.pauses.release(s.id);
  const later =
    s.expires_at !== null && Date.parse(s.expires_at) > Date.now() + (timeout ?? 0) * 1000;
  if (timeout !== undefined && (held || !later)) s = await setTimeoutOf(ctx, s, timeout);
  return reply.code(resumed ? 201 : 200).send(sandboxBody(ctx, s));
}

/** `count` of a fork request: 1 by default, at most what one forkd fork makes. */
function forkCount(body: Body): number {
  const v = body.count ?? 1;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > FORK_MAX) {
    throw bad('count', `must be a whole number from 1 to ${FORK_MAX}`);
  }
  return v;
}

/**
 * `sandbox.fork()`: a live branch of the running sandbox (it pauses only while its state
 * is captured) with `count` children forked from that instant, each with E2B's timeout.
 * The answer holds one entry per child: its connect body, or the error that child got.
 */
async function fork(ctx: E2bContext, request: FastifyRequest, caller: Caller) {
  const body = bodyOf(request);
  const count = forkCount(body);
  const timeout = optTimeout(body) ?? DEFAULT_TIMEOUT_S;
  let s = await liveSandbox(ctx, request);
  if (isPaused(s)) s = await ctx.services.sandboxes.resume(s.id);
  const branched = await ctx.services.branch.branch(s.id, { fork: count }, caller);
  const children = branched.children ?? { sandboxes: [], failed: [] };
  const made = await Promise.all(
    children.sandboxes.map(async (child) => {
      try {
        return {
          sandbox: sandboxBody(ctx, await ctx.services.sandboxes.extend(child.id, timeout)),
        };
      } catch (e) {
        return { error: e2bError(e).body };
      }
    }),
  );
  return [...made, ...children.failed.map((f) => ({ error: e2bError(f.error).body }))];
}

export async function controlRoutes(app: Api, { ctx }: { ctx: E2bContext }) {
  const config = { plane: 'control' as const };
  const sandboxes = ctx.services.sandboxes;
  const caller = (request: FastifyRequest): Caller => ({ principal: request.principal });

  const create = async (request: FastifyRequest, reply: FastifyReply) => {
    const s = await createSandbox(ctx, parseCreate(bodyOf(request)), caller(request));
    request.auditTarget = s.id;
    return reply.code(201).send(sandboxBody(ctx, s));
  };
  app.post('/sandboxes', { config }, create);
  app.post('/v2/sandboxes', { config }, create);

  app.get('/sandboxes/:sandboxID', { config }, async (request) =>
    detailBody(await liveSandbox(ctx, request)),
  );
  app.get('/sandboxes', { config }, async (request, reply) => list(ctx, request, reply));
  app.get('/v2/sandboxes', { config }, async (request, reply) => list(ctx, request, reply));

  app.delete('/sandboxes/:sandboxID', { config }, async (request, reply) => {
    const s = await liveSandbox(ctx, request);
    await sandboxes.kill(s.id);
    ctx.pauses.forget(s.id);
    return reply.code(204).send();
  });

  app.post('/sandboxes/:sandboxID/timeout', { config }, async (request, reply) => {
    const s = await liveSandbox(ctx, request);
    const timeout = optTimeout(bodyOf(request));
    if (timeout === undefined) throw bad('timeout', 'required (seconds)');
    await setTimeoutOf(ctx, s, timeout);
    return reply.code(204).send();
  });

  app.post('/sandboxes/:sandboxID/connect', { config }, async (r, reply) => connect(ctx, r, reply));
  app.post('/v2/sandboxes/:sandboxID/connect', { config }, async (r, reply) =>
    connect(ctx, r, reply),
  );

  app.post('/sandboxes/:sandboxID/pause', { config }, async (request, reply) => {
    const s = await liveSandbox(ctx, request);
    // pause({ keepMemory: false }) keeps only the disk: forkd's halted tier (a cold boot on resume).
    const memory = bodyOf(request).memory;
    if (memory !== undefined && typeof memory !== 'boolean')
      throw bad('memory', 'must be a boolean');
    if (isPaused(s)) {
      throw new ForkdError('name_taken', `sandbox ${toE2bId(s.id)} is already paused`);
    }
    // As E2B's: a paused sandbox does not expire; connect() gives it a timeout again.
    const tier = memory === false ? 'halted' : 'paused';
    await sandboxes.pause(s.id, { tier, holdTimeout: true });
    ctx.pauses.hold(s.id);
    return reply.code(204).send();
  });

  app.post('/sandboxes/:sandboxID/resume', { config }, async (request, reply) => {
    let s = await liveSandbox(ctx, request);
    if (!isPaused(s)) {
      throw new ForkdError('name_taken', `sandbox ${toE2bId(s.id)} is already running`);
    }
    s = await sandboxes.resume(s.id);
    ctx.pauses.release(s.id);
    const timeout = optTimeout(bodyOf(request));
    if (timeout !== undefined) s = await setTimeoutOf(ctx, s, timeout);
    return reply.code(201).send(sandboxBody(ctx, s));
  });

  app.post('/sandboxes/:sandboxID/fork', { config }, async (request) =>
    fork(ctx, request, caller(request)),
  );

  app.get('/sandboxes/:sandboxID/metrics', { config }, async (request) =>
    metricsOf(await liveSandbox(ctx, request), request.query as Record<string, unknown>),
  );
}
