/**
 * `forkd mcp`: serve the MCP tools on stdio for an MCP client (docs/mcp.md). The MCP SDK
 * is loaded only by this verb; the daemon serves the same tools at /mcp.
 */
import type { Command } from 'commander';
import { clientConfig, daemonOptions, type DaemonFlags } from './client.js';
import { action } from './output.js';

export function register(cmd: Command): void {
  daemonOptions(cmd).action(
    action(async (flags: DaemonFlags) => {
      const { serveStdio } = await import('../mcp/stdio.js');
      await serveStdio(clientConfig(flags));
    }),
  );
}
