"""Terminal sessions from Python (``sandbox.pty``): the daemon's WebSocket
(GET /v1/sandboxes/:id/pty, frames in docs/api.md) spoken by a minimal RFC 6455 client of
its own — one connection over the SDK's address (unix socket, TCP or TLS), masked client
frames, no extensions — so the SDK stays standard library only. A reader thread delivers
output to ``on_data`` as it arrives; a session lives in the guest, so ``disconnect()`` (or a
lost connection) leaves it running and ``connect(session, since=offset)`` picks it up."""

from __future__ import annotations

import base64
import hashlib
import json as jsonlib
import os
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._catalog import InternalError
from ._error import ForkdError
from ._transport import Request, Transport, _new_connection, _query_string
from ._types import from_wire
from .errors import error_from_response

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_CONT, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
#: The daemon's frames are small JSON or terminal output (64 KiB pieces); far more is a bug.
MAX_FRAME = 16 * 1024 * 1024
MAX_HEAD = 64 * 1024
#: How long ``disconnect()`` waits for the daemon's close frame before dropping the socket.
CLOSE_WAIT_S = 2.0

OnData = Callable[[bytes], Any]
OnError = Callable[[ForkdError], Any]


class PtyDetachedError(RuntimeError):
    """``wait()`` of a handle that lost its session while it still runs (taken over by
    another connection, disconnected, or the connection dropped): reattach with
    ``sandbox.pty.connect(e.session)``."""

    def __init__(self, session: str, why: str, code: Optional[int] = None) -> None:
        super().__init__(
            f"terminal session {session} {why}; reattach with sandbox.pty.connect({session!r})"
        )
        self.session = session
        #: The WebSocket close code, when the daemon closed it (1013: the client fell behind).
        self.code = code


@dataclass(frozen=True)
class PtyExit:
    """How a session's command ended."""

    #: None when a signal ended it.
    exit_code: Optional[int]
    signal: Optional[str]
    duration_ms: float


@dataclass(frozen=True)
class PtySessionInfo:
    """A terminal session the sandbox holds (``sandbox.pty.list()``)."""

    #: Its id, ``pty-N``: reattach with ``sandbox.pty.connect(session)``.
    session: str
    pid: int
    #: A client watches it now.
    attached: bool
    #: Its command ended; a reattach reports the exit.
    exited: bool
    #: Bytes of output produced so far.
    offset: int
    age_ms: int


class _WebSocket:
    """Frames over a connected socket; sends from any thread, receives on one."""

    def __init__(self, sock: socket.socket, pending: bytes) -> None:
        self._sock = sock
        self._buf = bytearray(pending)
        self._send_lock = threading.Lock()
        self.closed = False

    def send(self, opcode: int, payload: bytes) -> None:
        head = bytearray([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head.append(0x80 | n)
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = _mask(payload, mask)
        with self._send_lock:
            if self.closed:
                return
            self._sock.sendall(bytes(head) + mask + masked)

    def _exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self._sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise ConnectionResetError("the daemon closed the connection")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _frame(self) -> Tuple[bool, int, bytes]:
        b0, b1 = self._exactly(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._exactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._exactly(8))
        if n > MAX_FRAME:
            raise InternalError(f"the daemon sent a WebSocket frame of {n} bytes")
        mask = self._exactly(4) if b1 & 0x80 else b""
        payload = self._exactly(n)
        return bool(b0 & 0x80), b0 & 0x0F, _mask(payload, mask) if mask else payload

    def recv(self) -> Tuple[int, bytes]:
        """The next message (fragments joined); pings are answered here."""
        opcode: Optional[int] = None
        parts: List[bytes] = []
        while True:
            fin, op, payload = self._frame()
            if op == _PING:
                self.send(_PONG, payload)
                continue
            if op == _PONG:
                continue
            if op == _CLOSE:
                return op, payload
            if op != _CONT:
                opcode, parts = op, []
            parts.append(payload)
            if fin and opcode is not None:
                return opcode, b"".join(parts)

    def close(self, code: int = 1000, reason: str = "") -> None:
        try:
            self.send(_CLOSE, struct.pack("!H", code) + reason.encode()[:120])
        except OSError:
            pass
        with self._send_lock:
            self.closed = True

    def drop(self) -> None:
        with self._send_lock:
            self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def _mask(payload: bytes, mask: bytes) -> bytes:
    """XOR with the 4-byte mask, a whole integer at a time (fast enough for 64 KiB pieces)."""
    n = len(payload)
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "little")
    return (int.from_bytes(payload, "little") ^ key).to_bytes(n, "little")


def _handshake(transport: Transport, path: str, query: Dict[str, Any]) -> _WebSocket:
    """Dial the daemon, ask for the upgrade, and check its answer; a refusal (bad size, no
    such sandbox, an agent too old) raises its catalog error."""
    endpoint = transport.config.endpoint
    conn = _new_connection(endpoint)
    try:
        conn.connect()
    except OSError as e:
        raise transport.unreachable(e) from e
    sock = conn.sock
    conn.sock = None  # the socket is ours now: the HTTP connection must not close it
    key = base64.b64encode(os.urandom(16)).decode()
    target = endpoint.base_path + path + _query_string(query)
    host = endpoint.host or "localhost"
    headers = transport._headers(
        {
            "host": host if endpoint.kind == "unix" else f"{host}:{endpoint.port}",
            "connection": "Upgrade",
            "upgrade": "websocket",
            "sec-websocket-version": "13",
            "sec-websocket-key": key,
        }
    )
    head = f"GET {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    try:
        sock.settimeout(transport.config.request_timeout)
        sock.sendall((head + "\r\n").encode())
        status, fields, rest = _read_head(sock)
        if status != 101:
            raise _refusal(transport, path, status, fields, rest, sock)
        want = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
        if fields.get("sec-websocket-accept") != want:
            raise InternalError(f"{transport.url} answered the upgrade without a valid accept key")
        sock.settimeout(None)  # output may pause for as long as the terminal is idle
        return _WebSocket(sock, rest)
    except BaseException as e:
        sock.close()
        if isinstance(e, (ForkdError, KeyboardInterrupt)):
            raise
        if isinstance(e, OSError):
            raise transport.failure(e, transport.config.request_timeout, "did not open the terminal") from e
        raise


def _read_head(sock: socket.socket) -> Tuple[int, Dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk or len(data) > MAX_HEAD:
            raise ConnectionResetError("the daemon closed the connection during the upgrade")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return status, fields, rest


def _refusal(
    transport: Transport,
    path: str,
    status: int,
    fields: Dict[str, str],
    rest: bytes,
    sock: socket.socket,
) -> ForkdError:
    """The catalog error of a refused upgrade, from its JSON body."""
    length = min(int(fields.get("content-length", "0") or 0), MAX_HEAD)
    while len(rest) < length:
        chunk = sock.recv(length - len(rest))
        if not chunk:
            break
        rest += chunk
    try:
        body = jsonlib.loads(rest[:length] or b"null")
    except ValueError:
        body = None
    return transport._explain(error_from_response(status, body), Request("GET", path))


class PtyHandle:
    """One attachment to a terminal session::

        term.send_input("ls -l\\r")
        term.resize(100, 30)
        term.kill()
        print(term.wait())  # PtyExit(exit_code=None, signal='SIGKILL', …)
    """

    def __init__(self, ws: _WebSocket, on_data: OnData, on_error: Optional[OnError]) -> None:
        """Not for direct use: ``sandbox.pty.create`` / ``connect`` make them."""
        self._ws = ws
        self._on_data = on_data
        self._on_error = on_error
        #: Its id, ``pty-N``: keep it to reattach.
        self.session = ""
        #: The pid of its command in the guest.
        self.pid = -1
        #: Bytes of output the session had produced up to the last one received.
        self.offset = 0
        self._ready = threading.Event()
        self._ended = threading.Event()
        self._exit: Optional[PtyExit] = None
        self._failure: Optional[BaseException] = None
        self._reader = threading.Thread(target=self._read, name="forkd-pty", daemon=True)
        self._reader.start()

    def _opened(self, timeout: float) -> PtyHandle:
        """Wait for the daemon's ``ready`` (or the refusal that came instead)."""
        if not self._ready.wait(timeout) and not self._ended.is_set():
            self._ws.drop()
            raise InternalError(f"the terminal session did not start within {timeout} s")
        if not self._ready.is_set():
            raise self._failure or InternalError("the terminal session ended before it started")
        return self

    def _read(self) -> None:
        try:
            while True:
                opcode, data = self._ws.recv()
                if opcode == _BINARY:
                    self.offset += len(data)
                    self._on_data(data)
                elif opcode == _TEXT:
                    self._control(jsonlib.loads(data))
                elif opcode == _CLOSE:
                    code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
                    self._ws.close(code)
                    self._end(PtyDetachedError(self.session or "(unopened)", f"was closed ({code} {data[2:].decode(errors='replace')})", code))
                    return
        except BaseException as e:  # a callback's error or a lost connection ends the handle
            why = "lost its connection to the daemon" if isinstance(e, OSError) else f"stopped: {e!r}"
            self._end(PtyDetachedError(self.session or "(unopened)", why, 1006))
        finally:
            self._ws.drop()

    def _control(self, msg: Dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "ready":
            self.session, self.pid, self.offset = str(msg["session"]), int(msg["pid"]), int(msg["offset"])
            self._ready.set()
        elif kind == "exit":
            code = msg.get("exit_code")
            sig = msg.get("signal")
            self._exit = PtyExit(
                code if isinstance(code, int) else None,
                sig if isinstance(sig, str) else None,
                float(msg.get("duration_ms", 0)),
            )
        elif kind == "detached":
            self._end(PtyDetachedError(self.session, "was attached by another connection"))
        elif kind == "error":
            err = error_from_response(500, msg)
            if not self._ready.is_set():
                self._end(err)
            elif self._on_error is not None:
                self._on_error(err)

    def _end(self, failure: BaseException) -> None:
        if self._failure is None and self._exit is None:
            self._failure = failure
        self._ended.set()

    def _send_control(self, msg: Dict[str, Any]) -> None:
        self._ws.send(_TEXT, jsonlib.dumps(msg).encode())

    def send_input(self, data: Any) -> None:
        """Type into the terminal (a str is sent as UTF-8): ``\\r`` is Enter, ``\\x03``
        Ctrl-C, ``\\x04`` Ctrl-D."""
        self._ws.send(_BINARY, data.encode() if isinstance(data, str) else bytes(data))

    def resize(self, cols: int, rows: int) -> None:
        """Change the window size (the foreground job gets SIGWINCH); a bad size comes
        back through ``on_error`` and the session goes on."""
        self._send_control({"type": "resize", "cols": cols, "rows": rows})

    def signal(self, signal: str) -> None:
        """Send a signal (``"SIGINT"``…) to the terminal's foreground job, as a key would."""
        self._send_control({"type": "signal", "signal": signal})

    def kill(self) -> None:
        """Hang the terminal up: its shell is killed; ``wait()`` reports how it ended."""
        self._send_control({"type": "kill"})

    def wait(self, timeout: Optional[float] = None) -> PtyExit:
        """How the session's command ended; PtyDetachedError when this handle lost the
        session while it still runs; TimeoutError (the builtin) past ``timeout`` seconds."""
        if not self._ended.wait(timeout):
            raise TimeoutError(f"terminal session {self.session} still runs after {timeout} s")
        if self._exit is not None:
            return self._exit
        raise self._failure or InternalError("the terminal session ended without its exit")

    def disconnect(self) -> None:
        """Let go of the session without ending it; ``connect(session, since=offset)``
        resumes it."""
        try:
            self._send_control({"type": "detach"})
        except OSError:
            pass
        self._ws.close(1000, "detach")
        self._reader.join(CLOSE_WAIT_S)
        self._ws.drop()

    def __enter__(self) -> PtyHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


class Pty:
    """The terminal sessions of one sandbox (``sandbox.pty``)::

        out = []
        term = sbx.pty.create(cols=80, rows=24, on_data=out.append)
        term.send_input("exit 3\\r")
        term.wait().exit_code  # 3

    ``on_data`` runs on the handle's reader thread, in order."""

    def __init__(self, transport: Transport, base: str) -> None:
        self._transport = transport
        self._path = f"{base}/pty"

    def create(
        self,
        *,
        on_data: OnData,
        cols: int = 80,
        rows: int = 24,
        cmd: Optional[str] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        term: Optional[str] = None,
        on_error: Optional[OnError] = None,
    ) -> PtyHandle:
        """Open a terminal session running ``cmd`` (by ``/bin/sh -c``; default a login
        shell) on a ``cols`` × ``rows`` window."""
        query = {"cols": cols, "rows": rows, "cmd": cmd, "cwd": cwd, "user": user, "term": term}
        return self._open(query, on_data, on_error)

    def connect(
        self,
        session: str,
        *,
        on_data: OnData,
        since: Optional[int] = None,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
        on_error: Optional[OnError] = None,
    ) -> PtyHandle:
        """Reattach a running session by its id; output from ``since`` (default 0) is
        replayed, as far as the guest still holds it (128 KiB per session)."""
        query = {"session": session, "since": since, "cols": cols, "rows": rows}
        return self._open(query, on_data, on_error)

    def list(self) -> List[PtySessionInfo]:
        """The terminal sessions the sandbox holds, attached or not."""
        wire = self._transport.json(Request("GET", self._path))
        return [from_wire(PtySessionInfo, s) for s in wire["sessions"]]

    def _open(self, query: Dict[str, Any], on_data: OnData, on_error: Optional[OnError]) -> PtyHandle:
        ws = _handshake(self._transport, self._path, query)
        return PtyHandle(ws, on_data, on_error)._opened(self._transport.config.request_timeout)
