/**
 * The forkd MCP server (the official SDK's low-level `Server`), the same over stdio and
 * streamable HTTP: it lists the tools of tools.ts with their JSON schemas and hints,
 * validates arguments itself so a bad one becomes a tool error with the catalog code
 * `bad_request` (McpServer's own check answers without a code), runs the tool over the
 * TypeScript SDK, and answers every call with structuredContent: the result, or
 * `{ error: { code, message, details } }` with isError. Resources are in resources.ts.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  type CallToolResult,
  type ServerNotification,
  type ServerRequest,
} from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { Value } from 'typebox/value';
import { ForkdError, VERSION, type ClientConfig } from '@forkd/sdk';
import { progressOf } from './progress.js';
import { installResources } from './resources.js';
import { outputSchemaOf, SCHEMAS } from './schemas.js';
import { TOOLS, type ToolContext, type ToolOutput, type ToolSpec } from './tools.js';

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

const INSTRUCTIONS =
  'forkd runs microVM sandboxes. Prepare state once (snapshot_create, or sandbox_create then ' +
  'sandbox_exec), then fan out: sandbox_fork starts many warm copies of a snapshot; ' +
  'sandbox_branch captures a running sandbox mid-task (optionally forking it at once) so ' +
  'each child continues from that exact state. lineage_show tells what came from what. ' +
  'Kill sandboxes you no longer need. Failed calls carry a catalog code in error.code.';

const BY_NAME = new Map<string, ToolSpec>(TOOLS.map((t) => [t.name, t as ToolSpec]));

/** The first schema violation of `args`, as a catalog error naming the field. */
function badArguments(tool: ToolSpec, args: unknown): ForkdError | undefined {
  const schema = SCHEMAS[tool.name].input;
  if (Value.Check(schema, args)) return undefined;
  // The most telling violation: an unknown field, else one that names a rule.
  const errors = [...Value.Errors(schema, args)];
  const first =
    errors.find((e) => e.keyword === 'additionalProperties') ??
    errors.find((e) => e.keyword !== 'boolean') ??
    errors[0];
  const field = first?.instancePath.replace(/^\//, '').replaceAll('/', '.') || undefined;
  const extra = (first?.params as { additionalProperties?: string[] } | undefined)
    ?.additionalProperties;
  const where = extra ? `unknown argument ${extra.join(', ')}` : field ? `argument ${field}` : '';
  return new ForkdError(
    'bad_request',
    `${tool.name}: ${where ? `${where} ` : ''}${first?.message ?? 'is invalid'} (see the tool's inputSchema)`,
    { field: extra?.[0] ?? field, reason: first?.message },
  );
}

/** A thrown value as a catalog error (an abort is `timeout`, anything unknown `internal`). */
function asCatalogError(e: unknown): ForkdError {
  if (e instanceof ForkdError) return e;
  if ((e as Error | undefined)?.name === 'AbortError') {
    return new ForkdError('timeout', 'the call was cancelled');
  }
  return new ForkdError('internal', `unexpected failure: ${(e as Error)?.message ?? String(e)}`);
}

function success(out: ToolOutput): CallToolResult {
  const images = (out.images ?? []).map((i) => ({ type: 'image' as const, ...i }));
  return {
    content: [{ type: 'text', text: JSON.stringify(out.structured) }, ...images],
    structuredContent: out.structured,
  };
}

function failure(error: ForkdError): CallToolResult {
  const body = error.toJSON();
  return {
    content: [{ type: 'text', text: `${error.code}: ${error.message}` }],
    structuredContent: body,
    isError: true,
  };
}

function contextOf(config: ClientConfig, extra: Extra): ToolContext {
  const progress = progressOf({
    token: extra._meta?.progressToken,
    send: (params) => {
      extra.sendNotification({ method: 'notifications/progress', params }).catch(() => undefined);
    },
  });
  return { config, signal: extra.signal, progress };
}

async function callTool(
  config: ClientConfig,
  name: string,
  args: unknown,
  extra: Extra,
): Promise<CallToolResult> {
  const tool = BY_NAME.get(name);
  if (!tool) {
    return failure(
      new ForkdError('not_found', `no tool ${name}: list them with tools/list`, { tool: name }),
    );
  }
  const bad = badArguments(tool, args ?? {});
  if (bad) return failure(bad);
  try {
    return success(await tool.run((args ?? {}) as never, contextOf(config, extra)));
  } catch (e) {
    return failure(asCatalogError(e));
  }
}

/**
 * A server whose tools reach the daemon at `config` (its url and the caller's token).
 *
 * @example
 * const server = createMcpServer({ url: 'unix:/var/lib/forkd/run/forkd.sock' });
 * await server.connect(new StdioServerTransport());
 */
export function createMcpServer(config: ClientConfig): Server {
  const server = new Server(
    { name: 'forkd', title: 'forkd sandboxes', version: VERSION },
    { capabilities: { tools: {}, resources: {} }, instructions: INSTRUCTIONS },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: TOOLS.map((t) => ({
      name: t.name,
      title: t.title,
      description: t.description,
      inputSchema: SCHEMAS[t.name].input as never,
      outputSchema: outputSchemaOf(t.name) as never,
      annotations: { title: t.title, ...t.annotations },
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, (request, extra) =>
    callTool(config, request.params.name, request.params.arguments, extra),
  );
  installResources(server, config);
  return server;
}
