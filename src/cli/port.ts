/**
 * `forkd port ID GUEST_PORT [--host-port N]`: publish a guest port on the host's loopback
 * and print `host:port`; `--remove` stops publishing it; `--list` (or no GUEST_PORT)
 * lists what is published.
 */
import type { Command } from 'commander';
import { Sandbox } from '@forkd/sdk';
import { PUBLISHED_PORT, toWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action, printJson } from './output.js';
import { parseCount } from './parse.js';

interface PortFlags extends DaemonFlags {
  hostPort?: string;
  remove?: boolean;
}

const PORT_RANGE = { min: 1, max: 65535 };

export function register(cmd: Command): void {
  daemonOptions(
    cmd
      .argument('<id>', 'sandbox id')
      .argument('[guest-port]', 'the port a server in the sandbox listens on')
      .option('--host-port <n>', 'the host port (default: a free one)')
      .option('--remove', 'stop publishing the port')
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (id: string, guestPort: string | undefined, flags: PortFlags) => {
      const sbx = await Sandbox.connect(id, clientConfig(flags));
      if (guestPort === undefined) {
        const { ports } = await sbx.network();
        if (flags.json) printJson({ ports: ports.map((p) => toWire(PUBLISHED_PORT, p)) });
        else for (const p of ports) process.stdout.write(`${p.port} -> ${p.host}:${p.hostPort}\n`);
        return;
      }
      const port = parseCount(guestPort, 'guest-port', PORT_RANGE);
      if (flags.remove) return void (await sbx.unpublishPort(port));
      const hostPort =
        flags.hostPort === undefined
          ? undefined
          : parseCount(flags.hostPort, '--host-port', PORT_RANGE);
      const p = await sbx.publishPort(port, { hostPort });
      if (flags.json) printJson(toWire(PUBLISHED_PORT, p));
      else process.stdout.write(`${p.host}:${p.hostPort}\n`);
    }),
  );
}
