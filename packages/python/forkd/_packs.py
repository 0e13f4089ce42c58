"""``Forkd().packs``: portable snapshots. Pack a snapshot with its chain of parents and its
image into one file on the daemon's host, unpack one, push a snapshot to an OCI registry as
an artifact and pull it (or an ``https://`` pack file) back, as docs/packs.md describes.
Each call takes ``on_progress`` for the daemon's progress lines (the request then streams
NDJSON, like a snapshot create)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Type, TypeVar

from ._catalog import InternalError
from ._transport import Request, Transport, compact, quote_segment
from ._types import InstallInfo, PackInfo, PushInfo, from_wire
from .errors import error_from_response

T = TypeVar("T")
OnProgress = Callable[[str], None]


class Packs:
    """The daemon's snapshot packs::

    forkd = Forkd()
    forkd.packs.push("py", "127.0.0.1:5000/team/py:1")
    forkd.packs.pull("127.0.0.1:5000/team/py:1", tag="py-copy")
    """

    def __init__(self, transport: Transport, timeout: float) -> None:
        self._transport = transport
        self._timeout = timeout

    def pack(self, tag: str, file: str, *, on_progress: Optional[OnProgress] = None) -> PackInfo:
        """Pack ``tag``, its parents and its image into ``file`` (an absolute path on the
        daemon's host)."""
        path = f"/v1/snapshots/{quote_segment(tag)}/pack"
        return self._call(PackInfo, path, {"file": file}, on_progress)

    def unpack(
        self,
        file: str,
        *,
        tag: Optional[str] = None,
        force: bool = False,
        on_progress: Optional[OnProgress] = None,
    ) -> InstallInfo:
        """Verify a pack file on the daemon's host in full, then install it (``tag``
        renames its top snapshot; ``force`` replaces one of that tag)."""
        body = compact(file=file, tag=tag, force=force or None)
        return self._call(InstallInfo, "/v1/snapshots/unpack", body, on_progress)

    def push(
        self, tag: str, reference: str, *, on_progress: Optional[OnProgress] = None
    ) -> PushInfo:
        """Push ``tag`` and its chain to ``REGISTRY/REPO:TAG``; blobs the registry has
        already are skipped or cross-mounted."""
        path = f"/v1/snapshots/{quote_segment(tag)}/push"
        return self._call(PushInfo, path, {"reference": reference}, on_progress)

    def pull(
        self,
        reference: str,
        *,
        tag: Optional[str] = None,
        force: bool = False,
        on_progress: Optional[OnProgress] = None,
    ) -> InstallInfo:
        """Pull a pushed snapshot (or an ``https://`` pack file) with its chain and install
        it; an interrupted pull resumes where it broke off."""
        body = compact(reference=reference, tag=tag, force=force or None)
        return self._call(InstallInfo, "/v1/snapshots/pull", body, on_progress)

    def _call(
        self, cls: Type[T], path: str, body: Dict[str, Any], on_progress: Optional[OnProgress]
    ) -> T:
        if on_progress is None:
            request = Request("POST", path, json=body, timeout=self._timeout)
            return from_wire(cls, self._transport.json(request))
        request = Request("POST", path, json={**body, "stream": True}, timeout=self._timeout)
        for event in self._transport.send(request).lines():
            kind = event.get("type")
            if kind == "progress":
                on_progress(event["message"])
            elif kind == "done":
                return from_wire(cls, event["result"])
            elif kind == "error":
                raise error_from_response(500, {"error": event["error"]})
        raise InternalError(f"the {path} request ended without its outcome; see `forkd snapshots`")
