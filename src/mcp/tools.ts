/**
 * The MCP tools: one entry per forkd verb, named `noun_verb`, each a few lines over the
 * TypeScript SDK. The descriptions are written for an agent choosing a tool (when to fork,
 * when to branch); the hints say what a call may change. Results are the SDK's objects as
 * structuredContent; a failed call throws the SDK's catalog error and the server turns it
 * into a tool error carrying its code.
 * `sandbox_eval` returns the images a cell produced (a matplotlib figure) as MCP
 * image content too; `sandbox_run_code` is its former name, kept as an alias (docs/mcp.md).
 */
import type { Static } from 'typebox';
import { Forkd, Sandbox, Snapshot, tarOf, type ClientConfig, type ForkResult } from '@forkd/sdk';
import { withHeartbeat, type Progress } from './progress.js';
import { SCHEMAS, type ToolName } from './schemas.js';

/** What a tool call gets besides its arguments. */
export interface ToolContext {
  /** Where the daemon is and whose token to send (the MCP caller's own). */
  config: ClientConfig;
  /** Aborted when the client cancels the call. */
  signal: AbortSignal;
  progress: Progress;
}

/** An image a result carries, sent as MCP image content. */
export interface ImageOut {
  data: string;
  mimeType: string;
}

export interface ToolOutput {
  structured: Record<string, unknown>;
  images?: ImageOut[];
}

/** MCP's behaviour hints. */
interface Hints {
  readOnlyHint: boolean;
  destructiveHint: boolean;
  idempotentHint: boolean;
  openWorldHint: boolean;
}

export interface ToolSpec<N extends ToolName = ToolName> {
  name: N;
  title: string;
  description: string;
  annotations: Hints;
  run(args: Static<(typeof SCHEMAS)[N]['input']>, ctx: ToolContext): Promise<ToolOutput>;
}

const READ: Hints = {
  readOnlyHint: true,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false,
};
const MAKE: Hints = { ...READ, readOnlyHint: false, idempotentHint: false };
const REMOVE: Hints = { ...READ, readOnlyHint: false, destructiveHint: true };

const IMAGE_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
};

/** The image type of a guest path, by its extension. */
function imageTypeOf(path: string): string | undefined {
  return IMAGE_TYPES[/\.([a-z]+)$/i.exec(path)?.[1]?.toLowerCase() ?? ''];
}

/** A ForkResult as plain data (the SDK's Sandbox objects reduced to their info). */
function forkOut(result: ForkResult): Record<string, unknown> {
  return {
    sandboxes: result.sandboxes.map((s) => s.info),
    failed: result.failed.map(({ index, error }) => ({ index, error: error.toJSON().error })),
  };
}

/**
 * For calls the daemon finishes even when the client hangs up (fork, branch): let it
 * finish, and if the caller cancelled meanwhile, undo what it made and report the cancel.
 */
async function undoIfCancelled<T>(
  ctx: ToolContext,
  call: () => Promise<T>,
  undo: (made: T) => Promise<void>,
): Promise<T> {
  const made = await call();
  if (ctx.signal.aborted) {
    await undo(made).catch(() => undefined);
    throw ctx.signal.reason;
  }
  return made;
}

async function killAll(ids: string[], config: ClientConfig): Promise<void> {
  await Promise.all(ids.map((id) => Sandbox.kill(id, config).catch(() => undefined)));
}

/** sandbox_eval and its alias: one eval, its figures also as MCP image content. */
async function evalInContext(
  { sandboxId, code, context, timeoutMs }: Static<(typeof SCHEMAS)['sandbox_eval']['input']>,
  ctx: ToolContext,
): Promise<ToolOutput> {
  const sbx = await Sandbox.connect(sandboxId, { ...ctx.config, signal: ctx.signal });
  const x = await sbx.eval(code, { context, timeoutMs, signal: ctx.signal });
  const results = x.results.map((r) => ({ isMainResult: r.isMainResult, data: r.data }));
  const images = x.results.flatMap((r) => (r.png ? [{ data: r.png, mimeType: 'image/png' }] : []));
  return {
    structured: {
      text: x.text ?? null,
      results,
      stdout: x.logs.stdout.join(''),
      stderr: x.logs.stderr.join(''),
      error: x.error,
      executionCount: x.executionCount,
      durationMs: x.durationMs,
    },
    images: images.length ? images : undefined,
  };
}

const tool = <N extends ToolName>(spec: ToolSpec<N>): ToolSpec<N> => spec;

export const TOOLS = [
  tool({
    name: 'sandbox_create',
    title: 'Create a sandbox',
    description:
      'Start one microVM sandbox and return its id. Boots `image` (default busybox) cold, ' +
      'or starts already warm from `snapshot`. For several identical sandboxes from a ' +
      'snapshot use sandbox_fork; the sandbox lives until sandbox_kill or its timeoutMs.',
    annotations: MAKE,
    async run(args, ctx) {
      const sbx = await Sandbox.create({ ...args, ...ctx.config, signal: ctx.signal });
      return { structured: { sandbox: sbx.info } };
    },
  }),
  tool({
    name: 'sandbox_list',
    title: 'List sandboxes',
    description:
      'List sandboxes: id, state, the image or snapshot each came from, labels, expiry. ' +
      'Live ones by default; filter by state or by one label KEY=VALUE.',
    annotations: READ,
    async run(args, ctx) {
      const sandboxes = await Sandbox.list({ ...args, ...ctx.config, signal: ctx.signal });
      return { structured: { sandboxes } };
    },
  }),
  tool({
    name: 'sandbox_exec',
    title: 'Run a command in a sandbox',
    description:
      'Run one command in a running sandbox and wait for it: exit code, stdout, stderr. ' +
      'A string runs with `sh -c`; an array runs as is. State (files, processes started ' +
      'in the background) stays in the sandbox for the next call. A non-zero exit is a ' +
      'result, not an error; timeoutMs kills the command (timedOut: true).',
    annotations: { ...MAKE, openWorldHint: true },
    async run({ sandboxId, command, env, ...rest }, ctx) {
      const sbx = await Sandbox.connect(sandboxId, { ...ctx.config, signal: ctx.signal });
      const result = await sbx.commands.run(command, { ...rest, envs: env, signal: ctx.signal });
      return { structured: { ...result } };
    },
  }),
  tool({
    name: 'sandbox_eval',
    title: 'Eval Python code in a warm interpreter',
    description:
      'Eval Python code in a code context of a running sandbox: an interpreter that keeps ' +
      'its variables and imports between calls (context `python` by default, created on ' +
      'first use). Prefer it to sandbox_exec for step-by-step analysis: nothing is ' +
      're-imported. Returns the last expression as text, stdout/stderr, rich results by ' +
      'MIME type (figures as images) and an exception as `error` (a result, not a tool ' +
      'error). Forks and branches of the sandbox inherit the context with its state.',
    annotations: { ...MAKE, openWorldHint: true },
    run: evalInContext,
  }),
  tool({
    name: 'sandbox_run_code',
    title: 'Eval Python code (the former name of sandbox_eval)',
    description:
      'The same as sandbox_eval, under its former name, kept as an alias for callers that ' +
      'name it; prefer sandbox_eval.',
    annotations: { ...MAKE, openWorldHint: true },
    run: evalInContext,
  }),
  tool({
    name: 'files_read',
    title: 'Read a file in a sandbox',
    description:
      'Read a whole file from a sandbox. Text comes back as utf8; ask for base64 for ' +
      'binary files. A PNG, JPEG, GIF or WebP file also comes back as an image.',
    annotations: READ,
    async run({ sandboxId, path, encoding }, ctx) {
      const sbx = await Sandbox.connect(sandboxId, { ...ctx.config, signal: ctx.signal });
      const bytes = Buffer.from(await sbx.files.read(path, { signal: ctx.signal }));
      const mimeType = imageTypeOf(path);
      const as = encoding ?? (mimeType ? 'base64' : 'utf8');
      const content = bytes.toString(as);
      return {
        structured: { path, size: bytes.length, encoding: as, content },
        images: mimeType ? [{ data: bytes.toString('base64'), mimeType }] : undefined,
      };
    },
  }),
  tool({
    name: 'files_write',
    title: 'Write a file in a sandbox',
    description:
      'Create or replace a file in a sandbox with `content` (utf8 text, or base64 with ' +
      'encoding: base64). parents: true creates missing directories.',
    annotations: { ...MAKE, idempotentHint: true },
    async run({ sandboxId, path, content, encoding, mode, parents }, ctx) {
      const sbx = await Sandbox.connect(sandboxId, { ...ctx.config, signal: ctx.signal });
      const data = Buffer.from(content, encoding ?? 'utf8');
      const info = await sbx.files.write(path, data, { mode, parents, signal: ctx.signal });
      return { structured: { ...info } };
    },
  }),
  tool({
    name: 'files_list',
    title: 'List a directory in a sandbox',
    description: 'List the entries of a directory in a sandbox: name, kind, size, mode, mtime.',
    annotations: READ,
    async run({ sandboxId, path }, ctx) {
      const sbx = await Sandbox.connect(sandboxId, { ...ctx.config, signal: ctx.signal });
      const entries = await sbx.files.list(path, { signal: ctx.signal });
      return { structured: { path, entries } };
    },
  }),
  tool({
    name: 'snapshot_create',
    title: 'Create a snapshot',
    description:
      'Boot an image, run the `warm` commands (imports, installs, a model load), start ' +
      'the `start` services, then pause the VM to disk under `tag`. Every sandbox later ' +
      'forked from it starts with that work already done. Slow (seconds to minutes): ' +
      'sends progress, and cancelling stops it and leaves nothing behind. To capture a ' +
      'sandbox that is already running use sandbox_branch instead.',
    annotations: MAKE,
    async run(args, ctx) {
      const snap = await Snapshot.create({
        ...args,
        ...ctx.config,
        signal: ctx.signal,
        onProgress: ctx.progress,
      });
      return { structured: { snapshot: snap.info } };
    },
  }),
  tool({
    name: 'template_build',
    title: 'Build a template from a Dockerfile',
    description:
      'Build a snapshot (a template to fork) from a Dockerfile and a few context files. ' +
      'Each step runs in a VM and is cached as a snapshot, so a rebuild after an edit ' +
      'redoes only the steps from the edit on. A `# forkd:start --wait-port=N CMD` line ' +
      'leaves a server running: every fork of the result has it up at once. Slow: sends ' +
      'progress. Fork the result with sandbox_fork.',
    annotations: MAKE,
    async run(args, ctx) {
      const files = { ...(args.files ?? {}), '.forkd/Dockerfile': args.dockerfile };
      const result = await new Forkd({ ...ctx.config }).builds.build(tarOf(files), {
        tag: args.tag,
        dockerfile: '.forkd/Dockerfile',
        buildArgs: args.buildArgs,
        noCache: args.noCache,
        signal: ctx.signal,
        onEvent: (e) => {
          if (e.type === 'step') ctx.progress(`step ${e.step}/${e.total}: ${e.instruction}`);
        },
      });
      const steps = result.steps.map(({ step, instruction, status, durationMs }) => ({
        step,
        instruction,
        status,
        durationMs,
      }));
      return {
        structured: {
          tag: result.tag,
          snapshot: result.snapshot,
          steps,
          durationMs: result.durationMs,
        },
      };
    },
  }),
  tool({
    name: 'snapshot_list',
    title: 'List snapshots',
    description:
      'List snapshots: tag, state, whether it can be forked (bootable), the snapshot it ' +
      'chains on, live children, sizes.',
    annotations: READ,
    async run(_args, ctx) {
      const snapshots = await Snapshot.list({ ...ctx.config, signal: ctx.signal });
      return { structured: { snapshots } };
    },
  }),
  tool({
    name: 'sandbox_fork',
    title: 'Fork sandboxes from a snapshot',
    description:
      'Start n sandboxes from a snapshot, each already warm (it maps the snapshot ' +
      'memory copy-on-write instead of booting). Use it to fan out: try n approaches from ' +
      'the same prepared state. Children that fail to come up are listed in `failed` ' +
      'with their error; allOrNothing kills the rest then. A snapshot named by OCI ' +
      'reference is pulled onto this node by its first fork. To fork from a running ' +
      'sandbox, use sandbox_branch with fork.',
    annotations: MAKE,
    async run({ snapshot, env, ...rest }, ctx) {
      const result = await withHeartbeat(ctx.progress, `forking ${rest.n} from ${snapshot}`, () =>
        undoIfCancelled(
          ctx,
          () => Snapshot.fork(snapshot, { ...ctx.config, ...rest, envs: env, signal: ctx.signal }),
          (made) =>
            killAll(
              made.sandboxes.map((s) => s.id),
              ctx.config,
            ),
        ),
      );
      return { structured: forkOut(result) };
    },
  }),
  tool({
    name: 'sandbox_branch',
    title: 'Branch a running sandbox',
    description:
      'Capture a running sandbox (memory, processes, disk) into a new snapshot while it ' +
      'keeps running, after a pause of tens of milliseconds; with fork, also start that ' +
      'many children from the capture. Use it mid-task to explore alternatives from ' +
      'the current state: the children (and later sandbox_fork of the tag) continue ' +
      'exactly where the source was. Use sandbox_fork instead when the snapshot exists.',
    annotations: MAKE,
    async run({ sandboxId, ...rest }, ctx) {
      const result = await withHeartbeat(ctx.progress, `branching ${sandboxId}`, () =>
        undoIfCancelled(
          ctx,
          () => Sandbox.branch(sandboxId, { ...ctx.config, ...rest }),
          async (made) => {
            await killAll(made.children?.sandboxes.map((s) => s.id) ?? [], ctx.config);
            await made.snapshot.remove();
          },
        ),
      );
      const { snapshot, mode, pauseMs, capturedBytes, children } = result;
      const structured = { snapshot: snapshot.info, mode, pauseMs, capturedBytes };
      return { structured: children ? { ...structured, children: forkOut(children) } : structured };
    },
  }),
  tool({
    name: 'lineage_show',
    title: 'Show the lineage',
    description:
      'What came from what: every image, snapshot and live sandbox with the edge to its ' +
      'parent (a flat list; build the tree from `parent`). With tag, only that ' +
      "snapshot's subtree: the branches and forks made from it.",
    annotations: READ,
    async run({ tag }, ctx) {
      const nodes = await new Forkd(ctx.config).lineage({ tag, signal: ctx.signal });
      return { structured: { nodes } };
    },
  }),
  tool({
    name: 'sandbox_kill',
    title: 'Kill a sandbox',
    description:
      'Stop a sandbox and delete its disk. Its snapshots (branches) stay. Cannot be undone.',
    annotations: REMOVE,
    async run({ sandboxId }, ctx) {
      await Sandbox.kill(sandboxId, { ...ctx.config, signal: ctx.signal });
      return { structured: { sandboxId, killed: true } };
    },
  }),
  tool({
    name: 'snapshot_remove',
    title: 'Remove a snapshot',
    description:
      'Delete a snapshot. Refused (snapshot_in_use) while sandboxes forked from it live or ' +
      'snapshots chain on it, unless force (kills those sandboxes) or cascade (removes ' +
      'the chained snapshots too). Cannot be undone.',
    annotations: REMOVE,
    async run({ tag, force, cascade }, ctx) {
      await Snapshot.remove(tag, { ...ctx.config, force, cascade, signal: ctx.signal });
      return { structured: { tag, removed: true } };
    },
  }),
];
