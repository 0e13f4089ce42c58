/**
 * `forkd network ID`: a sandbox's network (mode, egress policy, denials, published ports);
 * with `--egress none`, `--allow-out`, `--deny-out` or `--no-internet` it changes the policy
 * at run time (fields not given are kept) and prints the result.
 */
import type { Command } from 'commander';
import { Sandbox, type SandboxNetwork } from '@forkd/sdk';
import { EGRESS, PUBLISHED_PORT, SANDBOX_NETWORK, toWire } from '@forkd/sdk/wire';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { networkOptions, parseEgress, type NetworkFlags } from './network-flags.js';
import { action, printJson } from './output.js';

interface ShowFlags extends DaemonFlags, NetworkFlags {}

export function register(cmd: Command): void {
  daemonOptions(
    networkOptions(cmd, false)
      .argument('<id>', 'sandbox id')
      .option('--json', 'machine-readable output'),
  ).action(
    action(async (id: string, flags: ShowFlags) => {
      const sbx = await Sandbox.connect(id, clientConfig(flags));
      const egress = parseEgress(flags);
      const net = egress === undefined ? await sbx.network() : await sbx.setEgress(egress);
      if (flags.json) printJson(wireOf(net));
      else process.stdout.write(describe(net));
    }),
  );
}

function wireOf(net: SandboxNetwork) {
  return {
    ...toWire(SANDBOX_NETWORK, net),
    egress: toWire(EGRESS, net.egress),
    ports: net.ports.map((p) => toWire(PUBLISHED_PORT, p)),
  };
}

function describe(net: SandboxNetwork): string {
  const e = net.egress;
  const policy = e.none
    ? 'none'
    : [
        `internet ${e.allowInternet ? 'on' : 'off'}`,
        ...(e.allowOut.length ? [`allow ${e.allowOut.join(' ')}`] : []),
        ...(e.denyOut.length ? [`deny ${e.denyOut.join(' ')}`] : []),
      ].join('; ');
  const lines = [
    `mode      ${net.mode}${net.isolation ? ` (${net.isolation})` : ''}`,
    ...(net.address ? [`address   ${net.address}`] : []),
    `egress    ${policy}`,
    `denied    ${net.denied}`,
    ...net.ports.map((p) => `port      ${p.port} -> ${p.host}:${p.hostPort}`),
  ];
  return lines.join('\n') + '\n';
}
