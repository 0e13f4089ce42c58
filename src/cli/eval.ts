/**
 * `forkd eval ID CODE`: run code in a warm interpreter of a running sandbox (a context,
 * default `python`), output streamed as it runs, the last expression's value printed, the
 * traceback of an error on stderr (exit 1); Ctrl-C interrupts the code, not the context.
 * `--fan-out FILE` runs N variants in N children branched from the sandbox, one result each.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { Sandbox, type EvalForkResult, type Execution } from '@forkd/sdk';
import { evalForkToWire, executionToWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { EXIT } from './exit.js';
import { action, printJson } from './output.js';
import { optionalName, parseCommandTimeout, parseSandboxId, usage } from './parse.js';

interface EvalFlags extends DaemonFlags {
  context?: string;
  file?: string;
  timeout?: string;
  fanOut?: string;
  keep?: boolean;
  json?: boolean;
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<id>', 'sandbox id')
      .argument('[code]', 'code to run ("-" reads it from stdin)')
      .option('-f, --file <path>', 'read the code from this file')
      .option(
        '--context <name>',
        'the context to run in (default python; python and node are made on first use)',
      )
      .option('--timeout <seconds>', 'interrupt the code after this long (the context lives on)')
      .option('--fan-out <file>', 'variants to run, one child each: a JSON array or one per line')
      .option('--keep', 'with --fan-out: keep the children running')
      .option('--json', 'print the Execution (or the fan-out results) as the REST API answers it'),
  ).action(
    action(async (id: string, code: string | undefined, flags: EvalFlags) => {
      const sandbox = await Sandbox.connect(parseSandboxId(id), clientConfig(flags));
      const context = optionalName(flags.context, '--context');
      const timeoutS = parseCommandTimeout(flags.timeout);
      const timeoutMs = timeoutS === undefined ? undefined : Math.round(timeoutS * 1000);
      if (flags.fanOut !== undefined) {
        if (code !== undefined || flags.file) throw usage('--fan-out takes the code from its file');
        const variants = parseVariants(await readFile(flags.fanOut, 'utf8'), flags.fanOut);
        const out = await sandbox.evalFork(variants, { context, timeoutMs, keep: flags.keep });
        return printFanOut(out, Boolean(flags.json));
      }
      const source = await codeOf(code, flags.file);
      return runOne(sandbox, source, { context, timeoutMs, json: Boolean(flags.json) });
    }),
  );
}

async function codeOf(arg: string | undefined, file: string | undefined): Promise<string> {
  if (arg !== undefined && file !== undefined) throw usage('give the code or --file, not both');
  if (file !== undefined) return readFile(file, 'utf8');
  if (arg === undefined) throw usage('give the code to run, "-" for stdin, or --file PATH');
  if (arg !== '-') return arg;
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** A JSON array of strings, or one variant per non-empty line. */
export function parseVariants(text: string, file: string): string[] {
  const trimmed = text.trim();
  let variants: unknown;
  if (trimmed.startsWith('[')) {
    try {
      variants = JSON.parse(trimmed);
    } catch (e) {
      throw usage(`${file}: not a JSON array of strings (${(e as Error).message})`);
    }
  } else {
    variants = trimmed.split('\n').filter((l) => l.trim().length > 0);
  }
  if (
    !Array.isArray(variants) ||
    variants.length === 0 ||
    variants.some((v) => typeof v !== 'string')
  ) {
    throw usage(`${file}: give a JSON array of code strings, or one variant per line`);
  }
  return variants as string[];
}

/** Non-text results are named on stderr (a PNG on a terminal helps nobody). */
function describeRich(x: Execution): string[] {
  return x.results.flatMap((r) =>
    r
      .formats()
      .filter((f) => f !== 'text/plain' && f !== 'application/json')
      .map((f) => `[${f} result: ${String(r.data[f]).length} characters; see --json]\n`),
  );
}

async function runOne(
  sandbox: Sandbox,
  code: string,
  o: { context?: string; timeoutMs?: number; json: boolean },
): Promise<number> {
  const interrupt = () =>
    void sandbox.contexts.interrupt(o.context ?? 'python').catch(() => undefined);
  process.on('SIGINT', interrupt);
  try {
    const x = await sandbox.eval(code, {
      context: o.context,
      timeoutMs: o.timeoutMs,
      ...(o.json
        ? {}
        : {
            onStdout: (s: string) => void process.stdout.write(s),
            onStderr: (s: string) => void process.stderr.write(s),
          }),
    });
    if (o.json) printJson(executionToWire(x));
    else {
      if (x.text !== undefined) process.stdout.write(`${x.text}\n`);
      for (const line of describeRich(x)) process.stderr.write(line);
      if (x.error) process.stderr.write(x.error.traceback || `${x.error.name}: ${x.error.value}\n`);
    }
    return x.error ? EXIT.failure : 0;
  } finally {
    process.off('SIGINT', interrupt);
  }
}

function printFanOut(out: EvalForkResult, json: boolean): number {
  if (json) printJson(evalForkToWire(out));
  for (const r of out.results) {
    if (json) continue;
    const head = `[${r.index}] ${r.sandbox ?? '-'}: `;
    if (r.failure) process.stdout.write(`${head}failed: ${r.failure.message}\n`);
    else if (r.execution?.error) {
      process.stdout.write(`${head}${r.execution.error.name}: ${r.execution.error.value}\n`);
    } else {
      const logs = r.execution?.logs.stdout.join('') ?? '';
      process.stdout.write(`${head}${logs}${r.execution?.text ?? ''}\n`);
    }
  }
  const bad = out.results.some((r) => r.failure || r.execution?.error);
  return bad ? EXIT.failure : 0;
}
