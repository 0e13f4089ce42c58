/**
 * A sandbox's ports as the host sees them: an inner forward per guest port (slirp's
 * `hostfwd` on the namespace's address, reachable only from the host), and for each
 * published port a TCP listener on the host (loopback by default) piped to that forward.
 * The daemon's HTTP route to a guest port uses the inner forward alone. Each connection
 * asks for its forward anew, so the network service can wake a paused sandbox first; a
 * hibernated sandbox keeps its listeners (they are the daemon's, not its QEMU's) while its
 * forwards, which died with its QEMU, are dropped.
 */
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { ForkdError } from '../../errors.js';
import type { VmHandle } from '../../drivers/vmm.js';
import { vmm } from '../vmm.js';

/**
 * Where a new connection to a published port goes (waking its sandbox first if paused),
 * and what to call when it closes.
 */
export type TargetOf = () => Promise<Target & { release?: () => void }>;

export interface PublishedPort {
  port: number;
  host_port: number;
  host: string;
}

interface Target {
  host: string;
  port: number;
}

/** Connections in flight per published port are bounded (each is two sockets). */
const MAX_CONNECTIONS = 256;

export class PortForwards {
  private readonly inners = new Map<number, Promise<Target>>();
  private readonly published = new Map<number, { info: PublishedPort; server: Server }>();
  private vm: VmHandle | undefined;

  /** The address the daemon connects to for `guestPort` (added on first use). */
  inner(vm: VmHandle, bind: string, guestPort: number): Promise<Target> {
    this.vm = vm;
    let t = this.inners.get(guestPort);
    if (!t) {
      t = innerForward(vm, bind, guestPort);
      this.inners.set(guestPort, t);
      t.catch(() => this.inners.delete(guestPort));
    }
    return t;
  }

  async publish(
    guestPort: number,
    target: TargetOf,
    opts: { hostPort?: number; bind?: string },
  ): Promise<PublishedPort> {
    const have = this.published.get(guestPort);
    if (have) return have.info;
    const host = opts.bind ?? '127.0.0.1';
    const server = createServer((c) => void pipeTo(c, target));
    server.maxConnections = MAX_CONNECTIONS;
    await new Promise<void>((resolve, reject) => {
      server.once('error', (e: NodeJS.ErrnoException) =>
        reject(
          e.code === 'EADDRINUSE'
            ? new ForkdError(
                'name_taken',
                `host port ${opts.hostPort} is in use; pick another or leave it out`,
                { host_port: opts.hostPort },
              )
            : e,
        ),
      );
      server.listen(opts.hostPort ?? 0, host, () => resolve());
    });
    const info = { port: guestPort, host_port: (server.address() as AddressInfo).port, host };
    this.published.set(guestPort, { info, server });
    return info;
  }

  async unpublish(guestPort: number): Promise<void> {
    const p = this.published.get(guestPort);
    if (!p) {
      throw new ForkdError('bad_request', `port ${guestPort} is not published`, {
        port: guestPort,
      });
    }
    this.published.delete(guestPort);
    await closeServer(p.server);
  }

  /** Its QEMU ended (hibernated): the forwards went with it, the host listeners stay. */
  hibernate(): void {
    this.inners.clear();
    this.vm = undefined;
  }

  list(): PublishedPort[] {
    return [...this.published.values()].map((p) => p.info).sort((a, b) => a.port - b.port);
  }

  /**
   * Close the host listeners only (the daemon stops, the sandbox runs on): slirp keeps its
   * forwards, and the next daemon listens on the same host ports again.
   */
  async detach(): Promise<void> {
    for (const p of this.published.values()) await closeServer(p.server);
    this.published.clear();
    this.inners.clear();
  }

  /** Close every listener and forward (the sandbox ends). */
  async close(): Promise<void> {
    for (const p of this.published.values()) await closeServer(p.server);
    this.published.clear();
    const vm = this.vm;
    if (vm?.alive) {
      for (const t of this.inners.values()) {
        const target = await t.catch(() => undefined);
        if (target) await vmm().removePortForward(vm, target.host, target.port);
      }
    }
    this.inners.clear();
  }
}

/** Hold a connection until its target is known (a wake may come first), then pipe it. */
async function pipeTo(c: Socket, target: TargetOf): Promise<void> {
  c.pause();
  c.on('error', () => c.destroy());
  let t: Awaited<ReturnType<TargetOf>>;
  try {
    t = await target();
  } catch {
    c.destroy(); // the sandbox ended, or its wake failed: the client sees a reset
    return;
  }
  if (t.release) c.once('close', t.release);
  if (c.destroyed) return t.release?.();
  const up = connect(t.port, t.host);
  c.pipe(up).pipe(c);
  const end = () => (c.destroy(), up.destroy());
  c.on('error', end);
  up.on('error', end);
}

/**
 * In a namespace the guest port keeps its number (so a forward an earlier daemon added is
 * replaced, not refused as taken); on the host's loopback it gets a free one.
 */
async function innerForward(vm: VmHandle, bind: string, guestPort: number): Promise<Target> {
  const inNamespace = bind !== '127.0.0.1';
  const port = inNamespace ? guestPort : await freePort();
  if (inNamespace) await vmm().removePortForward(vm, bind, port);
  await vmm().addPortForward(vm, bind, port, guestPort);
  return { host: bind, port };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

function closeServer(s: Server): Promise<void> {
  return new Promise((resolve) => {
    s.close(() => resolve());
    (s as Server & { closeAllConnections?: () => void }).closeAllConnections?.();
  });
}
