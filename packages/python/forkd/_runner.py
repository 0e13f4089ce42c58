"""forkd's in-guest code-context runner (stdlib only, Python 3.9+).

The daemon uploads this file into a sandbox and starts one process per context:
``python3 _runner.py start NAME CWD ENV_JSON`` binds /run/forkd/contexts/NAME.sock, writes
NAME.json, and returns once it serves (the server lives on, detached). The host reaches it
through ``forkd-agent --connect`` (a byte pipe): one JSON request line in, NDJSON events
out: stdout/stderr text while the code runs, ``result`` (MIME bundle), ``error`` (name,
value, traceback), then ``end``. State lives in one globals dict, kept between calls and
inherited by every fork of the sandbox (the process is part of the snapshot's memory).
A fork is noticed by the hostname changing (the host sets it to the sandbox id after every
restore): then ``random`` and ``numpy.random`` are reseeded before the code runs.
Not part of the Python SDK's API; it ships in this package only to keep Python in one tree.
"""

import ast
import base64
import json
import os
import signal
import socket
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

ROOT = "/run/forkd/contexts"
RUNNER = os.path.basename(__file__)


class ContextTimeout(Exception):
    """Raised in the running code when the eval's timeout expires."""


class Stream:
    """sys.stdout/sys.stderr while code runs: every write becomes an event at once."""

    def __init__(self, out: "Channel", kind: str) -> None:
        self.out, self.kind = out, kind

    def write(self, text: str) -> int:
        if text:
            self.out.event({"type": self.kind, "text": str(text)})
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class Channel:
    """One connection: newline-delimited JSON out; a vanished reader is not an error."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.gone = conn, False

    def event(self, obj: Dict[str, Any]) -> None:
        if self.gone:
            return
        try:
            self.conn.sendall((json.dumps(obj) + "\n").encode())
        except OSError:
            self.gone = True


def to_json(value: Any) -> Any:
    """The value as JSON when it has an exact JSON form (numpy scalars/arrays included)."""
    if hasattr(value, "tolist") and type(value).__module__.startswith("numpy"):
        value = value.tolist()
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return json.loads(text) if len(text) <= 1 << 20 else None


def figure_png(fig: Any) -> str:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def bundle(value: Any) -> Dict[str, Any]:
    """A MIME bundle like IPython's display: the _repr_*_ methods, figures as PNG."""
    out: Dict[str, Any] = {"text/plain": repr(value)}
    for mime, method in (
        ("text/html", "_repr_html_"),
        ("image/svg+xml", "_repr_svg_"),
        ("text/markdown", "_repr_markdown_"),
        ("text/latex", "_repr_latex_"),
    ):
        rep = getattr(value, method, None)
        if callable(rep):
            try:
                text = rep()
            except Exception:
                text = None
            if isinstance(text, str):
                out[mime] = text
    png = getattr(value, "_repr_png_", None)
    if callable(png):
        try:
            data = png()
            if isinstance(data, bytes):
                out["image/png"] = base64.b64encode(data).decode()
        except Exception:
            pass
    if type(value).__name__ == "Figure" and "matplotlib" in sys.modules:
        out["image/png"] = figure_png(value)
    js = to_json(value)
    if js is not None:
        out["application/json"] = js
    return out


def open_figures() -> List[Any]:
    """Figures pyplot still holds after the code ran (closed once sent, as Jupyter does)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    figs = [plt.figure(n) for n in plt.get_fignums()]
    plt.close("all")
    return figs


class Context:
    def __init__(self, name: str) -> None:
        self.name = name
        self.globals: Dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        self.count = 0
        self.host = socket.gethostname()

    def reseed_if_forked(self) -> None:
        host = socket.gethostname()
        if host == self.host:
            return
        self.host = host
        import random

        random.seed(os.urandom(32))
        np = sys.modules.get("numpy")
        if np is not None:
            np.random.seed(int.from_bytes(os.urandom(4), "little"))

    def run(self, code: str, out: Channel, timeout_ms: float) -> None:
        self.reseed_if_forked()
        self.count += 1
        started = time.monotonic()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = Stream(out, "stdout"), Stream(out, "stderr")  # type: ignore[assignment]
        if timeout_ms:
            signal.setitimer(signal.ITIMER_REAL, timeout_ms / 1000)
        try:
            value = self.execute(code)
            if timeout_ms:
                signal.setitimer(signal.ITIMER_REAL, 0)
            for fig in open_figures():
                out.event({"type": "result", "main": False, "data": {"image/png": figure_png(fig), "text/plain": repr(fig)}})
            if value is not None:
                out.event({"type": "result", "main": True, "data": bundle(value)})
        except BaseException as e:  # KeyboardInterrupt (interrupt) and timeouts included
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.report(e, out)
        finally:
            sys.stdout, sys.stderr = saved
        out.event({"type": "end", "execution_count": self.count, "duration_ms": round((time.monotonic() - started) * 1000, 3)})

    def execute(self, code: str) -> Any:
        tree = ast.parse(code, "<cell>", "exec")
        last: Optional[ast.Expression] = None
        tail = tree.body[-1] if tree.body else None
        if isinstance(tail, ast.Expr):
            tree.body.pop()
            last = ast.Expression(tail.value)
        exec(compile(tree, "<cell>", "exec"), self.globals)
        if last is None:
            return None
        value = eval(compile(last, "<cell>", "eval"), self.globals)
        self.globals["_"] = value
        return value

    def report(self, e: BaseException, out: Channel) -> None:
        name = "TimeoutError" if isinstance(e, ContextTimeout) else type(e).__name__
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        # Drop the runner's own frames: the user's traceback starts at <cell>.
        lines = [tb[0]] + [l for l in tb[1:-1] if RUNNER not in l] + [tb[-1]]
        out.event({"type": "error", "name": name, "value": str(e), "traceback": "".join(lines)})


def on_alarm(signum: int, frame: Any) -> None:
    raise ContextTimeout("the code ran past its timeout and was interrupted")


def serve(name: str, listener: socket.socket) -> None:
    ctx = Context(name)
    signal.signal(signal.SIGALRM, on_alarm)
    while True:
        try:
            conn, _ = listener.accept()
        except KeyboardInterrupt:
            continue  # an interrupt that arrived between two evals
        try:
            handle(ctx, conn)
        except KeyboardInterrupt:
            pass
        finally:
            conn.close()


def read_request(conn: socket.socket) -> Dict[str, Any]:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
    req = json.loads(buf or b"{}")
    if not isinstance(req, dict):
        raise ValueError("a request is a JSON object")
    return req


def handle(ctx: Context, conn: socket.socket) -> None:
    out = Channel(conn)
    try:
        req = read_request(conn)
    except ValueError as e:
        out.event({"type": "error", "name": "ProtocolError", "value": str(e), "traceback": ""})
        return
    op = req.get("op")
    if op == "ping":
        ctx.reseed_if_forked()
        out.event({"type": "pong", "pid": os.getpid(), "execution_count": ctx.count})
    elif op == "eval":
        ctx.run(req.get("code", ""), out, req.get("timeout_ms") or 0)
    else:
        out.event({"type": "error", "name": "ProtocolError", "value": "unknown op %r" % op, "traceback": ""})


def start(name: str, cwd: str, env_json: str) -> None:
    """Bind, write the metadata, detach the server, and return once it accepts."""
    os.makedirs(ROOT, exist_ok=True)
    path = os.path.join(ROOT, name + ".sock")
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    env = json.loads(env_json)
    ready_r, ready_w = os.pipe()
    if os.fork() != 0:
        os.close(ready_w)
        ok = os.read(ready_r, 1) == b"1"  # the server wrote its metadata
        sys.exit(0 if ok else 1)
    os.close(ready_r)
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    os.environ.update(env)
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.chdir(cwd)
    log = os.open(os.path.join(ROOT, name + ".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    meta = {"name": name, "language": "python", "cwd": cwd, "env": env, "pid": os.getpid(), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = os.path.join(ROOT, "." + name + ".json")
    with open(tmp, "w") as f:
        json.dump(meta, f)
    with open(os.path.join(ROOT, name + ".pid"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(tmp, os.path.join(ROOT, name + ".json"))
    os.write(ready_w, b"1")
    os.close(ready_w)
    sys.path.insert(0, cwd)
    serve(name, listener)


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "start":
        sys.stderr.write("usage: _runner.py start NAME CWD ENV_JSON\n")
        sys.exit(2)
    start(sys.argv[2], sys.argv[3], sys.argv[4])
