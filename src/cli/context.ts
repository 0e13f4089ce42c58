/**
 * `forkd context create|ls|restart|interrupt|rm ID …`: the code contexts (warm
 * interpreters) of a running sandbox, each with its own cwd and environment.
 */
import type { Command } from 'commander';
import { Sandbox, type ContextInfo } from '@forkd/sdk';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson, printTable } from './output.js';
import { collect, optionalName, parseEnv, parseName, parseSandboxId, usage } from './parse.js';

interface Flags extends DaemonFlags {
  json?: boolean;
  cwd?: string;
  env?: string[];
  language?: string;
}

const connect = (id: string, flags: Flags) =>
  Sandbox.connect(parseSandboxId(id), clientConfig(flags));

function show(c: ContextInfo, json: boolean): void {
  if (json) printJson(c);
  else process.stdout.write(`${c.name} (${c.language}, pid ${c.pid}, cwd ${c.cwd})\n`);
}

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .command('create <id> [name]')
      .description('start a context (default: Python, named after its language)')
      .option('--language <lang>', 'python (default) or node')
      .option('--cwd <dir>', 'its working directory (absolute; default /root)')
      .option('-e, --env <K=V>', 'environment variable (repeatable)', collect, [])
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (id: string, name: string | undefined, flags: Flags) => {
      if (flags.cwd !== undefined && !flags.cwd.startsWith('/')) {
        throw usage(`--cwd "${flags.cwd}" must be an absolute path in the sandbox`);
      }
      const language = flags.language;
      if (language !== undefined && language !== 'python' && language !== 'node') {
        throw usage(`--language "${language}" is not python or node`);
      }
      const sbx = await connect(id, flags);
      const envs = flags.env?.length ? parseEnv(flags.env) : undefined;
      show(
        await sbx.contexts.create({
          name: optionalName(name, 'the context name'),
          language,
          cwd: flags.cwd,
          envs,
        }),
        Boolean(flags.json),
      );
    }),
  );
  daemonOptions(
    cmd
      .command('ls <id>')
      .description("list the sandbox's contexts")
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (id: string, flags: Flags) => {
      const list = await (await connect(id, flags)).contexts.list();
      if (flags.json) return printJson(list);
      printTable(
        ['NAME', 'LANGUAGE', 'PID', 'CWD', 'STATE'],
        list.map((c) => [c.name, c.language, String(c.pid), c.cwd, c.alive ? 'alive' : 'dead']),
      );
    }),
  );
  for (const [verb, what] of [
    ['restart', 'replace the interpreter: fresh state, same cwd and env'],
    ['interrupt', 'interrupt the running code (Python: KeyboardInterrupt); the context lives on'],
    ['rm', 'end the context and forget its state'],
  ] as const) {
    daemonOptions(
      cmd
        .command(`${verb} <id> <name>`)
        .description(what)
        .option('--json', 'machine-readable output'),
    ).action(
      action(async (id: string, name: string, flags: Flags) => {
        const sbx = await connect(id, flags);
        const n = parseName(name, 'the context name');
        if (verb === 'restart') return show(await sbx.contexts.restart(n), Boolean(flags.json));
        await (verb === 'rm' ? sbx.contexts.remove(n) : sbx.contexts.interrupt(n));
        if (flags.json) printJson({ name: n, done: verb });
        else process.stdout.write(`${verb === 'rm' ? 'removed' : 'interrupted'} context ${n}\n`);
      }),
    );
  }
}
