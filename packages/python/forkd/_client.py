"""``Forkd``: one daemon's address and token, the transport to it, and the daemon-wide
calls (health, version, images, packs, lineage). Sandbox and Snapshot entry points build one from
their ``url``/``token``/``request_timeout`` arguments, so most code never names it."""

from __future__ import annotations

from typing import Any, Generic, List, Optional, Protocol, Tuple, Type, TypeVar, Union

from ._config import resolve_config
from ._packs import Packs
from ._builds import Builds
from ._transport import Request, Transport, compact, quote_segment
from ._types import ImageInfo, LineageNode, VersionInfo, from_wire

#: Seconds a call that does work in the daemon (boot, fork, capture, checksum) may take
#: to answer, unless request_timeout is longer: under TCG a snapshot takes seconds, many
#: forks on a busy host a minute.
LONG_CALL_TIMEOUT = 600.0


class Images:
    """The daemon's images (``Forkd().images``): list, build from a directory on the
    daemon's host, remove."""

    def __init__(self, transport: Transport, long_timeout: float = LONG_CALL_TIMEOUT) -> None:
        self._transport = transport
        self._long_timeout = long_timeout

    def list(self) -> List[ImageInfo]:
        """Every image.

        ``[i.name for i in Forkd().images.list()]``"""
        wire = self._transport.json(Request("GET", "/v1/images"))
        return [from_wire(ImageInfo, i) for i in wire["images"]]

    def create(
        self,
        name: str,
        from_dir: str,
        *,
        size_mib: Optional[int] = None,
        force: bool = False,
        boot_snapshot: bool = True,
    ) -> ImageInfo:
        """Build an image from a directory (absolute) on the daemon's host; ``force``
        replaces one of that name. Its boot snapshot is captured right after unless
        ``boot_snapshot=False``; one that cannot be is in ``warnings``, not an error."""
        body = compact(
            name=name,
            from_dir=from_dir,
            size_mib=size_mib,
            force=force or None,
            boot_snapshot=None if boot_snapshot else False,
        )
        req = Request("POST", "/v1/images", json=body, timeout=self._long_timeout)
        return from_wire(ImageInfo, self._transport.json(req))

    def capture_boot_snapshot(
        self,
        name: str,
        *,
        memory_mib: Optional[int] = None,
        cpus: Optional[int] = None,
        network: Optional[str] = None,
    ) -> ImageInfo:
        """Capture the image's boot snapshot of a size now (default: a sandbox's default
        size and network), so no start of that size boots a kernel; the image with its
        ``boot_snapshots``.

        ``Forkd().images.capture_boot_snapshot("app", memory_mib=512)``"""
        body = compact(memory_mib=memory_mib, cpus=cpus, network=network)
        path = f"/v1/images/{quote_segment(name)}/boot-snapshot"
        req = Request("POST", path, json=body, timeout=self._long_timeout)
        return from_wire(ImageInfo, self._transport.json(req))

    def remove(self, name: str) -> None:
        """Remove an image: ImageNotFoundError when there is none, ImageInUseError while
        snapshots or sandboxes use it."""
        self._transport.bytes(Request("DELETE", f"/v1/images/{quote_segment(name)}"))


class Forkd:
    """A client of one forkd daemon. Cheap to make: connections are pooled per address.

    ``url`` is ``unix:/path/to.sock`` or ``http(s)://host:port``, default FORKD_URL, else
    the local socket; ``token`` defaults to FORKD_TOKEN; ``request_timeout`` (seconds)
    bounds every socket operation of a prompt call::

        forkd = Forkd()
        print(forkd.version().accel)
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> None:
        self.transport = Transport(resolve_config(url, token, request_timeout))
        #: The daemon's images.
        self.images = Images(self.transport, self.long_timeout)
        #: Snapshot packs: pack, unpack, push, pull.
        self.packs = Packs(self.transport, self.long_timeout)
        #: Builds from a Dockerfile (docs/build.md).
        self.builds = Builds(self.transport, self.long_timeout)

    @property
    def url(self) -> str:
        """The address in use, like ``unix:/var/lib/forkd/run/forkd.sock``."""
        return self.transport.url

    @property
    def long_timeout(self) -> float:
        """How long a call that does work in the daemon may wait for its answer."""
        return max(LONG_CALL_TIMEOUT, self.transport.config.request_timeout)

    def health(self) -> None:
        """Returns when the daemon answers ``/healthz``; DaemonUnreachableError when none
        listens at the address."""
        self.transport.bytes(Request("GET", "/healthz"))

    def version(self) -> VersionInfo:
        """The daemon's version, QEMU version and accelerator."""
        return from_wire(VersionInfo, self.transport.json(Request("GET", "/version")))

    def lineage(self, tag: Optional[str] = None) -> List[LineageNode]:
        """Every image, snapshot and live sandbox, each with the edge to what it came from (a
        flat list: build the tree from ``parent``). With ``tag``, only that snapshot's
        subtree.

        ``children = [n for n in Forkd().lineage() if n.parent and n.parent.id == "warm"]``"""
        wire = self.transport.json(Request("GET", "/v1/lineage", query={"tag": tag}))
        return [from_wire(LineageNode, n) for n in wire["nodes"]]


class _Stateful(Protocol):
    @property
    def state(self) -> str: ...


I = TypeVar("I", bound=_Stateful)


class Remote(Generic[I]):
    """What a Sandbox and a Snapshot share: the client they talk through, what was last
    heard of them (``info``), and the id or tag that names them."""

    def __init__(self, client: Forkd, info: I) -> None:
        self._client = client
        self._info = info

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._key!r}, state={self._info.state!r})"

    @property
    def client(self) -> Forkd:
        """The daemon client it talks through."""
        return self._client

    @property
    def info(self) -> I:
        """What was last heard of it (when it was made or got, refreshed, or changed)."""
        return self._info

    @property
    def _key(self) -> str:
        raise NotImplementedError


A = TypeVar("A", bound="Remote[Any]")


def target_of(
    target: Union[A, str],
    cls: Type[A],
    url: Optional[str],
    token: Optional[str],
    request_timeout: Optional[float],
) -> Tuple[Forkd, str]:
    """The client and name of a call that works on the class with an id or tag
    (``Sandbox.kill(id, url=…)``) or on an instance (``sbx.kill()``, its own connection)."""
    if not isinstance(target, cls):
        return Forkd(url, token, request_timeout), str(target)
    if url is not None or token is not None or request_timeout is not None:
        raise TypeError(
            "url, token and request_timeout are for the class form "
            f"({cls.__name__}.kill(id, url=…)); an instance uses its own connection"
        )
    return target.client, target._key
