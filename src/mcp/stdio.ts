/**
 * `forkd mcp`: the MCP server on stdin/stdout, for an MCP client that starts it as a
 * subprocess (Claude Desktop, Cursor). stdout carries only the protocol; the server ends
 * when the client closes stdin.
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { ClientConfig } from '@forkd/sdk';
import { createMcpServer } from './server.js';

/** Serves MCP on stdio until stdin ends; tools reach the daemon at `config`. */
export async function serveStdio(config: ClientConfig): Promise<void> {
  const server = createMcpServer(config);
  const ended = new Promise<void>((resolve) => process.stdin.once('end', resolve));
  await server.connect(new StdioServerTransport());
  await ended;
  await server.close();
}
