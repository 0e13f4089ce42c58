/**
 * Progress for long tool calls. A client that sends a progressToken gets
 * notifications/progress: the daemon's own messages where the REST API streams them
 * (snapshot create), a heartbeat with the elapsed time where it answers once (fork, branch),
 * so the client can show life and keep resetting its request timeout.
 */

/** Reports one step; a no-op when the caller asked for no progress. */
export type Progress = (message: string) => void;

/** What a tool call needs to send notifications/progress. */
export interface ProgressSink {
  token: string | number | undefined;
  send(params: { progressToken: string | number; progress: number; message: string }): void;
}

/** A Progress that numbers its steps 1, 2, 3… (MCP wants progress to increase). */
export function progressOf(sink: ProgressSink): Progress {
  let step = 0;
  const token = sink.token;
  if (token === undefined) return () => undefined;
  return (message) => sink.send({ progressToken: token, progress: ++step, message });
}

/** Calls `fn` while saying `label (N s)` every `everyMs`; the beat stops when fn settles. */
export async function withHeartbeat<T>(
  progress: Progress,
  label: string,
  fn: () => Promise<T>,
  everyMs = 1000,
): Promise<T> {
  const started = Date.now();
  progress(label);
  const beat = setInterval(() => {
    progress(`${label} (${Math.round((Date.now() - started) / 1000)} s)`);
  }, everyMs);
  try {
    return await fn();
  } finally {
    clearInterval(beat);
  }
}
