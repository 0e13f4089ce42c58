// The UI's client of the REST API: every call carries the bearer token and turns the
// catalog's error body ({"error": {"code", "message"}}) into an ApiError. The event stream
// is read with fetch (EventSource cannot send a token) and reconnects on its own.

/** A catalog error from the daemon, or a network failure (`code` then `unreachable`). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  headers(extra = {}) {
    return { authorization: `Bearer ${this.token}`, ...extra };
  }

  async request(method, path, body) {
    let res;
    try {
      res = await fetch(path, {
        method,
        headers: this.headers(body === undefined ? {} : { 'content-type': 'application/json' }),
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      throw new ApiError(0, 'unreachable', `the daemon did not answer: ${e.message}`);
    }
    if (res.status === 204) return null;
    const data = await res.json().catch(() => null);
    if (!res.ok) {
      const err = data?.error ?? {};
      throw new ApiError(res.status, err.code ?? 'error', err.message ?? res.statusText);
    }
    return data;
  }

  get(path) {
    return this.request('GET', path);
  }

  post(path, body = {}) {
    return this.request('POST', path, body);
  }

  delete(path) {
    return this.request('DELETE', path);
  }

  /**
   * Calls `onChange(event)` for every change of GET /v1/events and `onStatus(bool)` as the
   * stream comes and goes; reconnects after a drop. Returns a function that stops it.
   */
  events(onChange, onStatus) {
    const stop = new AbortController();
    const run = async () => {
      while (!stop.signal.aborted) {
        try {
          const res = await fetch('/v1/events', { headers: this.headers(), signal: stop.signal });
          if (!res.ok) throw new Error(`status ${res.status}`);
          onStatus(true);
          await readSse(res.body, onChange);
        } catch {
          // dropped or refused: say so, wait, retry
        }
        onStatus(false);
        if (!stop.signal.aborted) await new Promise((r) => setTimeout(r, 2000));
      }
    };
    void run();
    return () => stop.abort();
  }
}

/** Parses a server-sent event stream, calling `onChange` with each `change` event's data. */
async function readSse(body, onChange) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const lines = block.split('\n');
      const event = lines.find((l) => l.startsWith('event: '))?.slice(7);
      const data = lines
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      if (event === 'change' && data) onChange(JSON.parse(data));
    }
  }
}
