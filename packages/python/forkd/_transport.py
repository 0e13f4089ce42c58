"""The SDK's only door to the daemon: one HTTP request over a unix socket (an
``http.client.HTTPConnection`` that dials AF_UNIX) or TCP/TLS, with a timeout on every
socket operation. Error answers become the catalog's exceptions; a daemon that cannot be
dialled becomes DaemonUnreachableError saying how to start one; a broken or silent
connection never hangs the caller. Connections are kept alive and reused per address."""

from __future__ import annotations

import errno
import http.client
import json as jsonlib
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote, urlencode

from ._catalog import DaemonUnreachableError, InternalError, NotFoundError, TimeoutError
from ._config import CONNECT_TIMEOUT, ConnectionConfig, Endpoint
from ._error import ForkdError
from ._version import VERSION
from .errors import error_from_response

#: Bytes a request body may be: raw, or an iterable of chunks sent as they come.
Body = Union[bytes, bytearray, memoryview, Iterable[bytes]]
QueryValue = Union[str, int, bool, None]

#: Error bodies larger than this are cut: only the JSON error is needed.
ERROR_BODY_LIMIT = 64 * 1024
#: Read and send size of streamed bodies.
CHUNK = 256 * 1024
#: An idle kept-alive connection older than this is closed, not reused: Node's HTTP
#: server closes idle ones after 5 s by default, and a reuse racing that close would fail.
MAX_IDLE = 4.0

#: Marks "the client's request_timeout" for a request's read timeout (None: no limit).
DEFAULT = -1.0


@dataclass
class Request:
    """One request: a path under the daemon's root, a query, at most one kind of body, and
    how long to wait for each read of the answer (``DEFAULT``: the request_timeout; None:
    as long as it takes, for commands that have no timeout of their own)."""

    method: str
    path: str
    query: Optional[Mapping[str, QueryValue]] = None
    json: Any = None
    body: Optional[Body] = None
    timeout: Optional[float] = DEFAULT


def quote_segment(value: str) -> str:
    """One path segment, escaped like encodeURIComponent."""
    return quote(value, safe="")


def compact(**fields: Any) -> Dict[str, Any]:
    """The fields that are set: a request carries only what the caller gave."""
    return {k: v for k, v in fields.items() if v is not None}


def _query_string(query: Optional[Mapping[str, QueryValue]]) -> str:
    pairs = [
        (k, ("true" if v else "false") if isinstance(v, bool) else str(v))
        for k, v in (query or {}).items()
        if v is not None
    ]
    return f"?{urlencode(pairs)}" if pairs else ""


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix stream socket (http.client only dials TCP itself)."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout, blocksize=CHUNK)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _new_connection(endpoint: Endpoint) -> http.client.HTTPConnection:
    if endpoint.kind == "unix":
        return _UnixConnection(endpoint.socket_path, CONNECT_TIMEOUT)
    if endpoint.kind == "https":
        return http.client.HTTPSConnection(
            endpoint.host,
            endpoint.port,
            timeout=CONNECT_TIMEOUT,
            context=ssl.create_default_context(),
            blocksize=CHUNK,
        )
    return http.client.HTTPConnection(
        endpoint.host, endpoint.port, timeout=CONNECT_TIMEOUT, blocksize=CHUNK
    )


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """True when an idle connection's peer closed it (it reads as ready: EOF)."""
    if conn.sock is None:
        return True
    try:
        readable, _, _ = select.select([conn.sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class _Pool:
    """Idle kept-alive connections to one address, shared by every thread."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._idle: List[Tuple[http.client.HTTPConnection, float]] = []
        self._lock = threading.Lock()

    def take(self) -> http.client.HTTPConnection:
        """The newest live idle connection, or a new one (not yet connected)."""
        with self._lock:
            while self._idle:
                conn, since = self._idle.pop()
                if time.monotonic() - since < MAX_IDLE and not _dropped(conn):
                    return conn
                conn.close()
        return _new_connection(self.endpoint)

    def give(self, conn: http.client.HTTPConnection) -> None:
        """Keep a connection whose last answer was read to its end; close stale ones."""
        now = time.monotonic()
        with self._lock:
            fresh = [(conn, now)]
            for idle, since in self._idle:
                if now - since < MAX_IDLE:
                    fresh.insert(-1, (idle, since))
                else:
                    idle.close()
            self._idle = fresh


_POOLS: Dict[Endpoint, _Pool] = {}
_POOLS_LOCK = threading.Lock()


def _pool_for(endpoint: Endpoint) -> _Pool:
    with _POOLS_LOCK:
        return _POOLS.setdefault(endpoint, _Pool(endpoint))


def _hint(code: Optional[str]) -> str:
    """What to do about a connection error, by errno name (the TS SDK's hints)."""
    if code in ("EACCES", "EPERM"):
        return (
            "this user may not open its socket; run as the user the daemon runs as, "
            "or set FORKD_URL"
        )
    if code in ("ECONNREFUSED", "ENOENT", "ENOTFOUND"):
        return "start it with `forkd daemon`, or set FORKD_URL to where one listens"
    return (
        "check that `forkd daemon` is running (`curl --unix-socket … /healthz`), "
        "or set FORKD_URL"
    )


def _errno_name(e: BaseException) -> Optional[str]:
    if isinstance(e, socket.gaierror):
        return "ENOTFOUND"
    number = getattr(e, "errno", None)
    return errno.errorcode.get(number) if isinstance(number, int) else None


def _chunks_of(source: Any) -> Iterator[bytes]:
    """A binary file's contents, read in CHUNK pieces (text files are refused)."""
    while True:
        chunk = source.read(CHUNK)
        if isinstance(chunk, str):
            raise TypeError("files.write needs a binary file (open it with 'rb'), not a text one")
        if not chunk:
            return
        yield chunk


def _payload(req: Request) -> Tuple[Dict[str, str], Optional[Body]]:
    """The headers and bytes a request sends: JSON, raw bytes, or chunks streamed as read."""
    if req.json is not None:
        return {"content-type": "application/json"}, jsonlib.dumps(req.json).encode()
    if req.body is None:
        return {}, None
    headers = {"content-type": "application/octet-stream"}
    if isinstance(req.body, (bytes, bytearray, memoryview)):
        return headers, req.body
    if hasattr(req.body, "read"):
        return headers, _chunks_of(req.body)
    return headers, req.body


class Transport:
    """Sends requests to one daemon. Every method returns for a 2xx answer or raises a
    ForkdError; none waits longer than its timeouts."""

    def __init__(self, config: ConnectionConfig) -> None:
        self.config = config
        self._pool = _pool_for(config.endpoint)

    @property
    def url(self) -> str:
        """The address, as a person writes it."""
        return self.config.url

    def send(self, req: Request) -> Response:
        """Send a request; the answer's body is left for the caller to read."""
        conn = self._pool.take()
        try:
            resp, complete = self._exchange(conn, req)
        except BaseException:
            conn.close()
            raise
        answer = Response(self, conn, resp, self._read_timeout(req), reusable=complete)
        if 200 <= resp.status < 300:
            return answer
        raise self._explain(answer.error(), req)

    def json(self, req: Request) -> Any:
        """Send, then parse the JSON answer (None for an empty one)."""
        data = self.bytes(req)
        return parse_json(data, f"the answer to {req.method} {req.path}") if data else None

    def bytes(self, req: Request) -> bytes:
        """Send, then read the whole answer."""
        return self.send(req).read_all()

    def unreachable(self, e: BaseException, what: str = "could not be reached") -> ForkdError:
        """The exception for a failed dial or a broken connection."""
        if isinstance(e, ForkdError):
            return e
        code = _errno_name(e)
        why = str(e) or type(e).__name__
        details: Dict[str, Any] = {"url": self.url}
        if code:
            details["errno"] = code
        return DaemonUnreachableError(
            f"the forkd daemon at {self.url} {what} ({why}): {_hint(code)}", details
        )

    def timed_out(self, timeout: Optional[float], what: str) -> ForkdError:
        """The exception for a socket operation that waited its whole timeout."""
        return TimeoutError(
            f"the forkd daemon at {self.url} {what}: nothing within {timeout} s; "
            "raise request_timeout, or check the daemon (`forkd ps`, its log)",
            {"url": self.url, "timeout_s": timeout},
        )

    def failure(self, e: BaseException, timeout: Optional[float], what: str) -> ForkdError:
        """A timed-out socket operation, or else a broken connection."""
        if isinstance(e, socket.timeout):
            return self.timed_out(timeout, what)
        return self.unreachable(e, what)

    def _explain(self, error: ForkdError, req: Request) -> ForkdError:
        """A route the daemon does not know most likely means a daemon older than this SDK:
        say so, and which call it was, instead of the daemon's generic "no such route"."""
        if type(error) is not NotFoundError:
            return error
        return NotFoundError(
            f"{req.method} {req.path}: the forkd daemon at {self.url} has no such route; it is "
            f"probably older than this SDK (forkd-python {VERSION}): compare `forkd version`, "
            f"and upgrade the daemon ({error.message})",
            {**(error.details or {}), "method": req.method, "path": req.path},
        )

    def _read_timeout(self, req: Request) -> Optional[float]:
        return self.config.request_timeout if req.timeout == DEFAULT else req.timeout

    def _headers(self, extra: Mapping[str, str]) -> Dict[str, str]:
        headers = {"accept": "application/json", "user-agent": f"forkd-python/{VERSION}"}
        if self.config.token:
            headers["authorization"] = f"Bearer {self.config.token}"
        headers.update(extra)
        return headers

    def _exchange(
        self, conn: http.client.HTTPConnection, req: Request
    ) -> Tuple[http.client.HTTPResponse, bool]:
        """Connect (if new), send the request, wait for the answer's head; and whether the
        request went out whole (else the connection cannot serve another)."""
        if conn.sock is None:
            try:
                conn.connect()
            except OSError as e:
                # A connect that times out is a daemon not there, like a refused one.
                raise self.unreachable(e) from e
        extra, payload = _payload(req)
        url = self.config.endpoint.base_path + req.path + _query_string(req.query)
        send_timeout = self.config.request_timeout
        _settimeout(conn, send_timeout)
        try:
            conn.request(req.method, url, body=payload, headers=self._headers(extra))
        except (OSError, http.client.HTTPException) as e:
            # The daemon may have refused an upload before reading all of it: its answer
            # (say, 404 or 413) says more than the broken pipe does.
            early = _early_answer(conn, req.method)
            if early is None:
                raise self.failure(e, send_timeout, "did not take the request") from e
            return early, False
        read_timeout = self._read_timeout(req)
        _settimeout(conn, read_timeout)
        try:
            return conn.getresponse(), True
        except (OSError, http.client.HTTPException) as e:
            raise self.failure(e, read_timeout, "did not answer") from e


def _settimeout(conn: http.client.HTTPConnection, timeout: Optional[float]) -> None:
    if conn.sock is not None:
        conn.sock.settimeout(timeout)


def _early_answer(
    conn: http.client.HTTPConnection, method: str
) -> Optional[http.client.HTTPResponse]:
    """An answer the daemon sent before it stopped reading the request, if any."""
    if conn.sock is None:
        return None
    try:
        conn.sock.settimeout(1.0)
        resp = http.client.HTTPResponse(conn.sock, method=method)
        resp.begin()
        return resp
    except (OSError, http.client.HTTPException):
        return None


class Response:
    """A 2xx (or error) answer whose body is read as a whole, in chunks, or as JSON lines.
    Read to its end, the connection goes back to the pool; ``close()`` drops it, which makes
    the daemon stop what the answer was streaming (a streaming exec is killed)."""

    def __init__(
        self,
        transport: Transport,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
        timeout: Optional[float],
        reusable: bool = True,
    ) -> None:
        self._transport = transport
        self._conn = conn
        self._resp = resp
        self._reusable = reusable
        # The raw socket, so another thread can wake a blocked read when closing.
        self._sock: Optional[socket.socket] = conn.sock or _response_socket(resp)
        self._timeout = timeout
        self._done = False
        self._lines: Optional[Iterator[Any]] = None

    @property
    def status(self) -> int:
        """The HTTP status."""
        return self._resp.status

    def header(self, name: str) -> Optional[str]:
        """One response header, or None."""
        return self._resp.getheader(name)

    def read_all(self, limit: Optional[int] = None) -> bytes:
        """The whole body (or its first ``limit`` bytes)."""
        return b"".join(self.chunks(limit))

    def chunks(self, limit: Optional[int] = None) -> Iterator[bytes]:
        """The body in pieces as they arrive; a body cut short raises DaemonUnreachableError."""
        size = 0
        with self._guard("broke while reading the answer"):
            while limit is None or size < limit:
                chunk = self._resp.read1(CHUNK)
                if not chunk:
                    # http.client ends a body cut short of its Content-Length silently.
                    if self._resp.length:
                        raise http.client.IncompleteRead(b"", self._resp.length)
                    self._finish()
                    return
                size += len(chunk)
                yield chunk
        self.close()

    def lines(self) -> Iterator[Any]:
        """Each JSON line of an NDJSON body, parsed, as it arrives. Always the same
        iterator, so one caller can take the first line and another the rest."""
        if self._lines is None:
            self._lines = self._read_lines()
        return self._lines

    def _read_lines(self) -> Iterator[Any]:
        with self._guard("broke while streaming the answer"):
            for line in iter(self._resp.readline, b""):
                if line.strip():
                    yield parse_json(line, "a streamed line")
            self._finish()

    def close(self) -> None:
        """Drop the connection (safe from another thread, and twice)."""
        if self._done:
            return
        self._done = True
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._resp.close()
        self._conn.close()

    def error(self) -> ForkdError:
        """The typed error of this (non-2xx) answer; the connection is dropped or reused."""
        try:
            body_text = self.read_all(ERROR_BODY_LIMIT)
        except ForkdError:
            body_text = b""
        try:
            body: Any = jsonlib.loads(body_text)
        except ValueError:
            body = None
        self.close()
        return error_from_response(self.status, body, _retry_after(self.header("retry-after")))

    def _finish(self) -> None:
        """The body was read to its end: keep the connection for the next request."""
        if self._done:
            return
        self._done = True
        self._resp.close()
        if not self._reusable or self._resp.will_close or self._conn.sock is None:
            self._conn.close()
        else:
            self._transport._pool.give(self._conn)

    def _guard(self, what: str) -> _ReadGuard:
        return _ReadGuard(self, what)


class _ReadGuard:
    """Turns a failed read into a ForkdError and drops the connection."""

    def __init__(self, response: Response, what: str) -> None:
        self._response = response
        self._what = what

    def __enter__(self) -> None:
        if self._response._sock is not None and not self._response._done:
            self._response._sock.settimeout(self._response._timeout)

    def __exit__(self, kind: Any, e: Optional[BaseException], tb: Any) -> None:
        if e is None:
            return
        self._response.close()
        if isinstance(e, (OSError, http.client.HTTPException)):
            transport = self._response._transport
            raise transport.failure(e, self._response._timeout, self._what) from e


def _response_socket(resp: http.client.HTTPResponse) -> Optional[socket.socket]:
    """The socket behind a response whose connection already let go of it (Connection: close)."""
    raw = getattr(getattr(resp, "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def parse_json(data: bytes, what: str) -> Any:
    """JSON the daemon sent; anything else is an InternalError, not a ValueError."""
    try:
        return jsonlib.loads(data)
    except ValueError:
        raise InternalError(
            f"{what} is not JSON: is FORKD_URL a forkd daemon? ({data[:80]!r})"
        ) from None


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
