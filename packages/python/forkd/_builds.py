"""``Forkd().builds``: a Dockerfile and its build context into a snapshot, every step run in
a forkd VM and cached as a snapshot (docs/build.md). The context goes up as a tar stream
(a directory is archived here with the standard library's ``tarfile``); the build's events
come back as they happen, to ``on_event``."""

from __future__ import annotations

import io
import json
import os
import tarfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from ._catalog import InternalError
from ._transport import Request, Transport
from .errors import error_from_response

OnEvent = Callable[[Dict[str, Any]], None]


def context_tar(context: Union[str, "os.PathLike[str]", Mapping[str, Union[str, bytes]]]) -> bytes:
    """The tar of a build context: a directory on this host, or ``{path: content}``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if isinstance(context, Mapping):
            for name, content in context.items():
                data = content.encode("utf-8") if isinstance(content, str) else content
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
        else:
            tar.add(os.fspath(context), arcname=".")
    return buf.getvalue()


class Builds:
    """The daemon's builds::

    forkd = Forkd()
    result = forkd.builds.build("./app", tag="web", on_event=print)
    forkd.builds.build({"Dockerfile": "FROM busybox\\nRUN echo hi\\n"}, tag="hi")
    """

    def __init__(self, transport: Transport, timeout: float) -> None:
        self._transport = transport
        self._timeout = timeout

    def build(
        self,
        context: Union[str, "os.PathLike[str]", Mapping[str, Union[str, bytes]], bytes],
        *,
        tag: Optional[str] = None,
        dockerfile: Optional[str] = None,
        build_args: Optional[Mapping[str, str]] = None,
        no_cache: bool = False,
        no_cache_from: Optional[int] = None,
        on_event: Optional[OnEvent] = None,
    ) -> Dict[str, Any]:
        """Build ``context`` (a directory, ``{path: content}``, or tar bytes) and return the
        result: ``tag``, ``snapshot``, ``config``, ``steps`` (each ``cached``, ``ran`` or
        ``config`` with its ``duration_ms``), ``duration_ms``. A failed step raises
        ``BuildFailedError`` with its output and exit code."""
        body = context if isinstance(context, bytes) else context_tar(context)
        query: Dict[str, Union[str, int, bool]] = {}
        if tag is not None:
            query["tag"] = tag
        if dockerfile is not None:
            query["dockerfile"] = dockerfile
        if build_args:
            query["build_args"] = json.dumps(dict(build_args))
        if no_cache:
            query["no_cache"] = True
        if no_cache_from is not None:
            query["no_cache_from"] = no_cache_from
        request = Request("POST", "/v1/builds", query=query, body=body, timeout=self._timeout)
        for event in self._transport.send(request).lines():
            kind = event.get("type")
            if kind == "done":
                result: Dict[str, Any] = event["result"]
                return result
            if kind == "error":
                raise error_from_response(500, {"error": event["error"]})
            if on_event is not None:
                on_event(event)
        raise InternalError("the build ended without its outcome; see `forkd snapshots --all`")

    def prune(self) -> List[str]:
        """Remove the build step snapshots nothing uses; returns their tags."""
        request = Request("POST", "/v1/builds/prune", timeout=self._timeout)
        removed: List[str] = self._transport.json(request)["removed"]
        return removed
