/**
 * The MCP resources, read through the TypeScript SDK like the tools: `forkd://sandboxes`
 * (the live sandboxes), `forkd://lineage` (what came from what) and the template
 * `forkd://snapshots/{tag}` (one snapshot; listing resources names every snapshot). Each
 * reads as JSON. An unknown tag is the MCP "resource not found" error, with the catalog
 * code in its data.
 */
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  ErrorCode,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  McpError,
  ReadResourceRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { Forkd, ForkdError, Sandbox, Snapshot, type ClientConfig } from '@forkd/sdk';

const JSON_TYPE = 'application/json';
const SNAPSHOT_PREFIX = 'forkd://snapshots/';

/** The fixed resources and how each reads. */
const FIXED: Record<
  string,
  {
    name: string;
    description: string;
    read(c: ClientConfig, signal: AbortSignal): Promise<unknown>;
  }
> = {
  'forkd://sandboxes': {
    name: 'sandboxes',
    description: 'The live sandboxes (as sandbox_list returns them)',
    read: async (c, signal) => ({ sandboxes: await Sandbox.list({ ...c, signal }) }),
  },
  'forkd://lineage': {
    name: 'lineage',
    description: 'Every image, snapshot and live sandbox with the edge to its parent',
    read: async (c, signal) => ({ nodes: await new Forkd(c).lineage({ signal }) }),
  },
};

async function read(uri: string, config: ClientConfig, signal: AbortSignal): Promise<unknown> {
  const fixed = FIXED[uri];
  if (fixed) return fixed.read(config, signal);
  if (uri.startsWith(SNAPSHOT_PREFIX)) {
    const tag = decodeURIComponent(uri.slice(SNAPSHOT_PREFIX.length));
    return { snapshot: (await Snapshot.get(tag, { ...config, signal })).info };
  }
  throw new McpError(ErrorCode.InvalidParams, `no resource ${uri}`, { code: 'not_found' });
}

/** Adds resources/list, resources/templates/list and resources/read to `server`. */
export function installResources(server: Server, config: ClientConfig): void {
  server.setRequestHandler(ListResourcesRequestSchema, async (_r, extra) => {
    const snapshots = await Snapshot.list({ ...config, signal: extra.signal });
    return {
      resources: [
        ...Object.entries(FIXED).map(([uri, r]) => ({
          uri,
          name: r.name,
          description: r.description,
          mimeType: JSON_TYPE,
        })),
        ...snapshots.map((s) => ({
          uri: SNAPSHOT_PREFIX + encodeURIComponent(s.tag),
          name: `snapshot ${s.tag}`,
          mimeType: JSON_TYPE,
        })),
      ],
    };
  });
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: `${SNAPSHOT_PREFIX}{tag}`,
        name: 'snapshot',
        description: 'One snapshot by tag: state, chain, sizes, live children',
        mimeType: JSON_TYPE,
      },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async ({ params }, extra) => {
    try {
      const body = await read(params.uri, config, extra.signal);
      return { contents: [{ uri: params.uri, mimeType: JSON_TYPE, text: JSON.stringify(body) }] };
    } catch (e) {
      if (!(e instanceof ForkdError)) throw e;
      // -32002 is MCP's "resource not found"; other catalog errors are internal errors.
      const notFound = e.status === 404;
      throw new McpError(notFound ? -32002 : ErrorCode.InternalError, e.message, e.toJSON().error);
    }
  });
}
