/**
 * The shim's log: containerd gives every task's bundle a `log` FIFO and copies what the
 * shim writes there into its own log. One shim serves many tasks (main.ts), so it keeps
 * the FIFO of each task it serves open and writes to the newest one still read; a task's
 * FIFO closes with the task. Writes never block and never fail the shim.
 */
import { closeSync, constants, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';

const NAME = 'containerd-shim-forkd-v2';

export class ShimLog {
  /** Task id → the fd of its bundle's log FIFO, oldest first. */
  private readonly fds = new Map<string, number>();

  /** Open the log FIFO of task `id`'s bundle (none read by anyone: a shim run by hand). */
  open(id: string, bundle: string): void {
    if (this.fds.has(id)) return;
    try {
      this.fds.set(id, openSync(join(bundle, 'log'), constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // nobody reads it
    }
  }

  close(id: string): void {
    const fd = this.fds.get(id);
    this.fds.delete(id);
    if (fd !== undefined) closeSync(fd);
  }

  /** Write `msg` to the newest log still read; a closed or full pipe is skipped. */
  readonly write = (msg: string): void => {
    const line = `time="${new Date().toISOString()}" level=info msg=${JSON.stringify(msg)} runtime=${NAME}\n`;
    for (const [id, fd] of [...this.fds].reverse()) {
      try {
        writeSync(fd, line);
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'EAGAIN') return; // full: drop the line
        this.close(id); // EPIPE: containerd stopped reading it
      }
    }
  };
}
