/**
 * `Forkd`: one daemon's address and token, the transport to it, and the daemon-wide calls
 * (health, version, images, lineage). Sandbox entry points build one from their options, so
 * most code never names it.
 */
import { resolveConfig, type ClientConfig } from './config.js';
import { Transport } from './http.js';
import { Images } from './images.js';
import { Packs } from './packs.js';
import { Builds } from './builds.js';
import type { LineageNode, VersionInfo } from './types.js';
import { fromWire, LINEAGE_EDGE, LINEAGE_NODE, VERSION_INFO } from './wire.js';

/**
 * The options every call takes.
 *
 * @example
 * await sandbox.kill({ signal: AbortSignal.timeout(5000) });
 */
export interface CallOptions {
  /** Aborting ends the request; the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * Which part of the lineage to get.
 *
 * @example
 * const subtree = await new Forkd().lineage({ tag: 'py-numpy' });
 */
export interface LineageOptions extends CallOptions {
  /** Only this snapshot and what descends from it (default: everything). */
  tag?: string;
}

/**
 * A client of one forkd daemon. Cheap to make: connections are pooled per address.
 *
 * @example
 * const forkd = new Forkd({ url: 'unix:/var/lib/forkd/run/forkd.sock' });
 * console.log((await forkd.version()).version);
 */
export class Forkd {
  /**
   * The transport every call goes through (for the SDK's own modules; not a stable API).
   *
   * @example
   * console.log(forkd.transport.config.explicit); // false when using the default socket
   */
  readonly transport: Transport;
  /**
   * The daemon's images.
   *
   * @example
   * for (const image of await forkd.images.list()) console.log(image.name);
   */
  readonly images: Images;
  /**
   * Portable snapshots: pack, unpack, push, pull.
   *
   * @example
   * await forkd.packs.push('py', '127.0.0.1:5000/team/py:1');
   */
  readonly packs: Packs;
  /**
   * Builds from a Dockerfile (docs/build.md).
   *
   * @example
   * await forkd.builds.build(contextTar, { tag: 'web' });
   */
  readonly builds: Builds;

  constructor(config: ClientConfig = {}) {
    this.transport = new Transport(resolveConfig(config));
    this.images = new Images(this.transport);
    this.packs = new Packs(this.transport);
    this.builds = new Builds(this.transport);
  }

  /**
   * The address in use, like `unix:/var/lib/forkd/run/forkd.sock`.
   *
   * @example
   * console.log(`talking to ${new Forkd().url}`);
   */
  get url(): string {
    return this.transport.config.url;
  }

  /**
   * Resolves when the daemon answers `/healthz`; throws DaemonUnreachableError when none
   * listens at the address.
   *
   * @example
   * await new Forkd().health({ signal: AbortSignal.timeout(2000) });
   */
  async health(opts: CallOptions = {}): Promise<void> {
    await this.transport.bytes({ method: 'GET', path: '/healthz', signal: opts.signal });
  }

  /**
   * The daemon's version, QEMU version and accelerator.
   *
   * @example
   * const { version, accel } = await new Forkd().version();
   */
  async version(opts: CallOptions = {}): Promise<VersionInfo> {
    const wire = await this.transport.json({
      method: 'GET',
      path: '/version',
      signal: opts.signal,
    });
    return fromWire(VERSION_INFO, wire);
  }

  /**
   * Every image, snapshot and live sandbox, each with the edge to what it came from (a
   * flat list: build the tree from `parent`). With `tag`, only that snapshot's subtree.
   *
   * @example
   * const nodes = await new Forkd().lineage();
   * const children = (id: string) => nodes.filter((n) => n.parent?.id === id);
   */
  async lineage(opts: LineageOptions = {}): Promise<LineageNode[]> {
    const wire = await this.transport.json<{ nodes: unknown[] }>({
      method: 'GET',
      path: '/v1/lineage',
      query: { tag: opts.tag },
      signal: opts.signal,
    });
    return wire.nodes.map((n) => {
      const node = fromWire(LINEAGE_NODE, n);
      return { ...node, parent: node.parent && fromWire(LINEAGE_EDGE, node.parent) };
    });
  }
}
