'use strict';
/**
 * forkd's in-guest code-context runner for Node (no dependencies, Node 18+): the twin of
 * packages/python/forkd/_runner.py, speaking the same protocol, so the host cannot tell
 * them apart. The daemon uploads it into a sandbox and a shell starts `node node-runner.cjs
 * serve NAME CWD ENV_JSON` detached, in CWD with ENV (src/drivers/agent/runner.ts: Node
 * cannot fork, and a Node starter would cost a second interpreter start, seconds under
 * TCG): one server per context on /run/forkd/contexts/NAME.sock, which writes NAME.json
 * and then "1" on fd 3 once it serves. One JSON request line in (through
 * `forkd-agent --connect`), NDJSON events out: stdout/stderr while the code runs, `result`
 * (text/plain and, when exact, application/json), `error` (name, value, traceback), `end`.
 *
 * Cells run in the server's own global context (vm.runInThisContext, as node's REPL does
 * with useGlobal), so top-level let/const/var/function declarations persist between evals
 * and every Node global is there. Synchronous code is stopped by vm's `timeout` and
 * `breakOnSigint`, which end the script and keep the process; a cell whose value is a
 * Promise is awaited within what is left of the timeout. Math.random is replaced by a
 * generator fed from /dev/urandom whose pool is dropped when the hostname changes (the host
 * sets it to the sandbox id after every restore): V8's own generator cannot be reseeded, so
 * every fork would otherwise draw the same numbers.
 */
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const util = require('node:util');
const vm = require('node:vm');
const { createRequire } = require('node:module');

const ROOT = '/run/forkd/contexts';
const RUNNER = path.basename(__filename);
const JSON_MAX = 1 << 20;
/** What the runner itself needs, kept before any cell can replace the globals. */
const { stringify } = JSON;
const realWrite = {
  stdout: process.stdout.write.bind(process.stdout),
  stderr: process.stderr.write.bind(process.stderr),
};

// ---- Math.random from the kernel's entropy, reseeded in every fork ----

let pool = null;
let poolAt = 0;

function urandom(n) {
  const buf = Buffer.alloc(n);
  const fd = fs.openSync('/dev/urandom', 'r');
  try {
    fs.readSync(fd, buf, 0, n, null);
  } finally {
    fs.closeSync(fd);
  }
  return buf;
}

/** A double in [0, 1) with 53 random bits, as V8's own is. */
function random() {
  if (pool === null || poolAt >= pool.length) {
    pool = urandom(4096);
    poolAt = 0;
  }
  const hi = pool.readUInt32LE(poolAt) >>> 5;
  const lo = pool.readUInt32LE(poolAt + 4) >>> 6;
  poolAt += 8;
  return (hi * 67108864 + lo) / 9007199254740992;
}

// ---- results ----

/** True when JSON.stringify gives the value back exactly (no NaN, -0, Dates, classes…). */
function exactJson(v, depth) {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return true;
  if (typeof v === 'number') return Number.isFinite(v) && !Object.is(v, -0);
  if (typeof v !== 'object' || depth > 64) return false;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) if (!(i in v) || !exactJson(v[i], depth + 1)) return false;
    return true;
  }
  const proto = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) return false;
  return Object.keys(v).every((k) => exactJson(v[k], depth + 1));
}

function bundle(value) {
  const data = { 'text/plain': util.inspect(value, { depth: 4, colors: false }) };
  try {
    if (exactJson(value, 0)) {
      const text = stringify(value);
      if (text.length <= JSON_MAX) data['application/json'] = JSON.parse(text);
    }
  } catch {
    // a getter that throws, a proxy: no JSON form
  }
  return data;
}

/** The stack from the cell down: the runner's and vm's frames are cut. */
function cleanStack(stack) {
  return String(stack)
    .split('\n')
    .filter((l) => !/^\s+at /.test(l) || !(l.includes(RUNNER) || /\(node:|at node:/.test(l)))
    .join('\n');
}

function errorEvent(e) {
  if (e && e.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') return timeoutEvent();
  if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') return interruptEvent();
  if (e instanceof Error || (e && typeof e.stack === 'string')) {
    const name = String(e.name || (e.constructor && e.constructor.name) || 'Error');
    return { type: 'error', name, value: String(e.message), traceback: cleanStack(e.stack) };
  }
  const text = util.inspect(e);
  return { type: 'error', name: 'Uncaught', value: text, traceback: `Uncaught ${text}` };
}

function timeoutEvent() {
  const value = 'the code ran past its timeout and was interrupted';
  return { type: 'error', name: 'TimeoutError', value, traceback: `TimeoutError: ${value}` };
}

function interruptEvent() {
  const value = 'the code was interrupted (SIGINT)';
  return { type: 'error', name: 'InterruptError', value, traceback: `InterruptError: ${value}` };
}

// ---- one connection ----

/** Newline-delimited JSON out; a vanished reader is not an error. */
class Channel {
  constructor(conn) {
    this.conn = conn;
    this.gone = false;
    conn.on('error', () => (this.gone = true));
  }

  event(obj) {
    if (!this.gone) this.conn.write(stringify(obj) + '\n');
  }
}

/** Route process.stdout/stderr (console included) to `out` until the returned undo. */
function capture(out) {
  const hook = (type) =>
    function write(chunk, encoding, cb) {
      const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
      if (text) out.event({ type, text });
      const done = typeof encoding === 'function' ? encoding : cb;
      if (typeof done === 'function') process.nextTick(done);
      return true;
    };
  process.stdout.write = hook('stdout');
  process.stderr.write = hook('stderr');
  return () => {
    process.stdout.write = realWrite.stdout;
    process.stderr.write = realWrite.stderr;
  };
}

class Context {
  constructor(cwd) {
    this.count = 0;
    this.host = os.hostname();
    /** Rejects the awaited value of the running cell on SIGINT (sync code has breakOnSigint). */
    this.abort = null;
    globalThis.require = createRequire(path.join(cwd, '<cell>'));
    Math.random = random;
    process.on('SIGINT', () => this.abort && this.abort(interruptEvent()));
  }

  reseedIfForked() {
    const host = os.hostname();
    if (host === this.host) return;
    this.host = host;
    pool = null;
  }

  async run(code, out, timeoutMs) {
    this.reseedIfForked();
    this.count += 1;
    const started = process.hrtime.bigint();
    const deadline = timeoutMs ? Date.now() + timeoutMs : 0;
    const undo = capture(out);
    try {
      const script = new vm.Script(code, { filename: '<cell>' });
      const opts = { breakOnSigint: true };
      if (timeoutMs) opts.timeout = Math.max(1, Math.floor(timeoutMs));
      let value = script.runInThisContext(opts);
      if (value !== null && typeof value === 'object' && typeof value.then === 'function') {
        value = await this.settle(value, deadline);
      }
      if (value !== undefined) {
        globalThis._ = value;
        out.event({ type: 'result', main: true, data: bundle(value) });
      }
    } catch (e) {
      out.event(e && e.type === 'error' ? e : errorEvent(e));
    } finally {
      undo();
    }
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    out.event({ type: 'end', execution_count: this.count, duration_ms: Math.round(ms * 1000) / 1000 });
  }

  /** The promise's value, or a timeout/interrupt event thrown (the promise runs on). */
  settle(promise, deadline) {
    return new Promise((resolve, reject) => {
      const left = Math.max(1, deadline - Date.now());
      const timer = deadline ? setTimeout(() => reject(timeoutEvent()), left) : undefined;
      this.abort = reject;
      promise.then(resolve, reject).finally(() => clearTimeout(timer));
    }).finally(() => (this.abort = null));
  }
}

function readRequest(conn, onRequest) {
  let buf = '';
  const onData = (chunk) => {
    buf += chunk.toString('utf8');
    if (!buf.includes('\n')) return;
    conn.off('data', onData).off('end', onEnd);
    onRequest(buf.slice(0, buf.indexOf('\n')));
  };
  const onEnd = () => onRequest(buf);
  conn.on('data', onData).on('end', onEnd);
}

async function handle(ctx, conn, line) {
  const out = new Channel(conn);
  let req;
  try {
    req = JSON.parse(line || '{}');
    if (req === null || typeof req !== 'object' || Array.isArray(req)) {
      throw new Error('a request is a JSON object');
    }
  } catch (e) {
    out.event({ type: 'error', name: 'ProtocolError', value: String(e.message), traceback: '' });
    return;
  }
  if (req.op === 'ping') {
    ctx.reseedIfForked();
    out.event({ type: 'pong', pid: process.pid, execution_count: ctx.count });
  } else if (req.op === 'eval') {
    await ctx.run(String(req.code ?? ''), out, Number(req.timeout_ms) || 0);
  } else {
    const value = `unknown op ${util.inspect(req.op)}`;
    out.event({ type: 'error', name: 'ProtocolError', value, traceback: '' });
  }
}

/** The server (its starter detached it): bind, write the metadata, say "1" on fd 3, serve. */
function serve(name, cwd, envJson) {
  const ctx = new Context(cwd);
  // Code that throws later (a timer's callback) must not end the context.
  process.on('uncaughtException', (e) => process.stderr.write(`${cleanStack(e && e.stack ? e.stack : e)}\n`));
  process.on('unhandledRejection', (e) => process.stderr.write(`unhandled rejection: ${util.inspect(e)}\n`));
  let queue = Promise.resolve();
  // Half-open: the host's client shuts its side once the request is sent; the answer
  // still has to go back on ours.
  const server = net.createServer({ allowHalfOpen: true }, (conn) => {
    readRequest(conn, (line) => {
      // One cell at a time, in arrival order, as the Python runner's accept loop does.
      queue = queue.then(() => handle(ctx, conn, line)).finally(() => conn.end());
    });
  });
  const sock = path.join(ROOT, `${name}.sock`);
  fs.rmSync(sock, { force: true });
  server.listen(sock, () => {
    const meta = {
      name,
      language: 'node',
      cwd,
      env: JSON.parse(envJson),
      pid: process.pid,
      created_at: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    };
    const tmp = path.join(ROOT, `.${name}.json`);
    fs.writeFileSync(tmp, stringify(meta));
    fs.writeFileSync(path.join(ROOT, `${name}.pid`), String(process.pid));
    fs.renameSync(tmp, path.join(ROOT, `${name}.json`));
    fs.writeSync(3, '1');
    fs.closeSync(3);
  });
}

const [mode, name, cwd, envJson] = process.argv.slice(2);
if (process.argv.length !== 6 || mode !== 'serve') {
  realWrite.stderr('usage: node-runner.cjs serve NAME CWD ENV_JSON (fd 3: told "1" once it serves)\n');
  process.exit(2);
}
serve(name, cwd, envJson);
