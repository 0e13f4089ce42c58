/**
 * Fake terminal sessions for the API tests, behind the sandbox service's `pty`: a session
 * echoes its input; a line `exit N` ends it with code N; a resize prints `[size COLSxROWS]`,
 * a signal `[SIGNAME]`; kill ends it by SIGKILL. Output is numbered like the agent's, kept
 * whole, so a reattach with `since` replays exactly what was missed; one attachment at a
 * time, the previous one ends `detached`, as in the guest.
 */
import type { PtyQueryT, PtySessionT } from '../../src/contract/schemas.js';
import { ForkdError } from '../../src/errors.js';
import type { PtyAttachment, PtyEnd } from '../../src/services/contracts.js';

interface Watcher {
  onData: (chunk: Buffer, offset: number) => void;
  end: (e: PtyEnd) => void;
}

interface Session {
  id: string;
  sandbox: string;
  output: Buffer;
  line: string;
  ended?: PtyEnd;
  watcher?: Watcher;
}

export class FakePtys {
  private readonly sessions = new Map<string, Session>();
  private counter = 1;

  clear(): void {
    this.sessions.clear();
  }

  /** The sessions of one sandbox, as the guest would list them. */
  list(sandbox: string): PtySessionT[] {
    return [...this.sessions.values()]
      .filter((s) => s.sandbox === sandbox)
      .map((s) => ({
        session: s.id,
        pid: 100,
        attached: s.watcher !== undefined,
        exited: s.ended !== undefined,
        offset: s.output.length,
        age_ms: 0,
      }));
  }

  open(sandbox: string, req: PtyQueryT, onData: Watcher['onData']): PtyAttachment {
    if (req.session === undefined) {
      const s: Session = {
        id: `pty-${this.counter++}`,
        sandbox,
        output: Buffer.alloc(0),
        line: '',
      };
      this.sessions.set(s.id, s);
      return this.attach(s, 0, onData);
    }
    const s = this.sessions.get(req.session);
    if (!s || s.sandbox !== sandbox) {
      throw new ForkdError('pty_session_not_found', `no terminal session ${req.session}`);
    }
    return this.attach(s, req.since ?? 0, onData);
  }

  private attach(s: Session, since: number, onData: Watcher['onData']): PtyAttachment {
    s.watcher?.end({ type: 'detached' });
    let resolveEnd!: (e: PtyEnd) => void;
    const ended = new Promise<PtyEnd>((r) => (resolveEnd = r));
    const watcher: Watcher = { onData, end: resolveEnd };
    s.watcher = watcher;
    const offset = Math.min(since, s.output.length);
    // The replay goes out after the caller has the attachment, as the agent's would.
    queueMicrotask(() => {
      if (offset < s.output.length) onData(s.output.subarray(offset), offset);
      if (s.ended && s.watcher === watcher) this.finish(s);
    });
    const live = () => s.watcher === watcher && !s.ended;
    return {
      session: s.id,
      pid: 100,
      offset,
      input: async (data) => void (live() && this.type(s, data.toString('utf8'))),
      resize: async (cols, rows) => void (live() && this.emit(s, `[size ${cols}x${rows}]\r\n`)),
      signal: async (name) => void (live() && this.emit(s, `[${name}]\r\n`)),
      kill: async () => void (live() && this.end(s, null, 'SIGKILL')),
      detach: async () => {
        if (s.watcher !== watcher) return;
        s.watcher = undefined;
        watcher.end({ type: 'detached' });
      },
      ended,
    };
  }

  private type(s: Session, text: string): void {
    this.emit(s, text.replaceAll('\r', '\r\n'));
    for (const ch of text) {
      if (ch !== '\r' && ch !== '\n') {
        s.line += ch;
        continue;
      }
      const m = /^exit (\d+)$/.exec(s.line.trim());
      s.line = '';
      if (m) return this.end(s, Number(m[1]), null);
    }
  }

  private emit(s: Session, text: string): void {
    const chunk = Buffer.from(text);
    const offset = s.output.length;
    s.output = Buffer.concat([s.output, chunk]);
    s.watcher?.onData(chunk, offset);
  }

  private end(s: Session, code: number | null, signal: string | null): void {
    s.ended = { type: 'exit', exit_code: code, signal, duration_ms: 1, offset: s.output.length };
    if (s.watcher) this.finish(s);
  }

  /** Reported once, to a watcher: then the session is gone, as in the agent. */
  private finish(s: Session): void {
    s.watcher?.end(s.ended as PtyEnd);
    s.watcher = undefined;
    this.sessions.delete(s.id);
  }
}
