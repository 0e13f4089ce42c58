"""Where the daemon is and how to authenticate, by the TypeScript SDK's rules
(packages/sdk/src/config.ts): explicit arguments, else FORKD_URL and FORKD_TOKEN, else the
daemon's default socket ``$FORKD_HOME/run/forkd.sock``, FORKD_HOME defaulting to
/var/lib/forkd as root and ~/.local/share/forkd otherwise."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional
from urllib.parse import urlsplit

from ._catalog import BadRequestError

#: Seconds every prompt call may wait on one socket operation (connect, send, receive).
DEFAULT_REQUEST_TIMEOUT = 60.0
#: Seconds to connect: a local socket answers at once, a remote one within this.
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Endpoint:
    """A parsed daemon address: ``kind`` is ``unix`` (``socket_path``), ``http`` or ``https``
    (``host``, ``port``, ``base_path``)."""

    kind: str
    socket_path: str = ""
    host: str = ""
    port: int = 0
    base_path: str = ""


@dataclass(frozen=True)
class ConnectionConfig:
    """A daemon address with the environment and defaults applied.

    ``url`` is the address as a person writes it (for messages); ``explicit`` is False when
    neither an argument nor FORKD_URL named a daemon (the default socket)."""

    endpoint: Endpoint
    url: str
    token: Optional[str]
    explicit: bool
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT


def default_socket_path(env: Optional[Mapping[str, str]] = None) -> str:
    """The daemon's default socket: ``$FORKD_HOME/run/forkd.sock``.

    >>> default_socket_path({"FORKD_HOME": "/srv/forkd"})
    '/srv/forkd/run/forkd.sock'
    """
    env = os.environ if env is None else env
    home = env.get("FORKD_HOME") or (
        "/var/lib/forkd"
        if os.getuid() == 0
        else os.path.join(os.path.expanduser("~"), ".local", "share", "forkd")
    )
    return os.path.join(home, "run", "forkd.sock")


def parse_url(url: str) -> Endpoint:
    """Parse ``http(s)://host:port[/prefix]`` or ``unix:/path/to.sock``.

    >>> parse_url("unix:/var/lib/forkd/run/forkd.sock").socket_path
    '/var/lib/forkd/run/forkd.sock'
    """
    if url.startswith("unix:"):
        # "unix:///x" is "/x", as in the TS SDK; "unix:/x" and "unix:x" are taken as written.
        socket_path = re.sub(r"^//(?=/)", "", url[len("unix:") :])
        if socket_path:
            return Endpoint(kind="unix", socket_path=socket_path)
    elif re.match(r"^https?://", url):
        parts = urlsplit(url)
        kind = "https" if parts.scheme == "https" else "http"
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.hostname and port != -1:
            return Endpoint(
                kind=kind,
                host=parts.hostname,
                port=port or (443 if kind == "https" else 80),
                base_path=parts.path.rstrip("/"),
            )
    raise BadRequestError(
        f'forkd URL "{url}" is neither http(s)://host:port nor unix:/path/to.sock',
        {"url": url},
    )


def resolve_config(
    url: Optional[str] = None,
    token: Optional[str] = None,
    request_timeout: Optional[float] = None,
    env: Optional[Mapping[str, str]] = None,
) -> ConnectionConfig:
    """Apply FORKD_URL / FORKD_TOKEN and the default socket to the given arguments.

    >>> resolve_config(env={"FORKD_URL": "http://127.0.0.1:7070"}).endpoint.port
    7070
    """
    env = os.environ if env is None else env
    given = url or env.get("FORKD_URL") or ""
    address = given or f"unix:{default_socket_path(env)}"
    if request_timeout is not None and request_timeout <= 0:
        raise BadRequestError(
            f"request_timeout must be more than 0 seconds, not {request_timeout}",
            {"field": "request_timeout"},
        )
    return ConnectionConfig(
        endpoint=parse_url(address),
        url=address,
        token=token or env.get("FORKD_TOKEN") or None,
        explicit=bool(given),
        request_timeout=DEFAULT_REQUEST_TIMEOUT if request_timeout is None else request_timeout,
    )
