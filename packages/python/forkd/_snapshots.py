"""``Snapshot``: make one (boot an image, warm it up, capture it), find and list them, fork
sandboxes from one — each starts already warm and shares the snapshot's memory
copy-on-write — keep a pool of VMMs for it, compact or remove a chain; and the results of
a fork and of a branch (``sandbox.branch()``), generic over the sandbox and snapshot
classes so the async SDK hands back its own."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Generic, List, Optional, TypeVar, Union

from ._catalog import InternalError
from ._client import Forkd, Remote, target_of
from ._error import ForkdError
from ._sandbox import Egress, Idle, Limits, Sandbox, idle_body, limits_body, whole_seconds
from ._transport import Request, compact, quote_segment
from ._types import PoolInfo, SandboxInfo, SnapshotInfo, VerifyReport, from_wire
from .errors import error_from_response

S = TypeVar("S")
N = TypeVar("N")
S2 = TypeVar("S2")
N2 = TypeVar("N2")

#: A callback that gets a snapshot create's progress messages.
OnProgress = Callable[[str], Any]


@dataclass(frozen=True)
class ForkFailure:
    """A child that did not come up: its place in the fork and its typed error."""

    index: int
    error: ForkdError


@dataclass(frozen=True)
class ForkResult(Generic[S]):
    """What a fork made: the children that came up (running, each answering), and a
    ``ForkFailure`` per child that did not."""

    sandboxes: List[S]
    failed: List[ForkFailure] = field(default_factory=list)

    def map(self, fn: Callable[[S], S2]) -> ForkResult[S2]:
        """The same result with each sandbox passed through ``fn``."""
        return ForkResult([fn(s) for s in self.sandboxes], self.failed)


@dataclass(frozen=True)
class BranchResult(Generic[N, S]):
    """What a branch made: the new snapshot, how its memory was taken (``copy``/``live``),
    how long the source was stopped (``pause_ms``), how much memory it had written
    (``captured_bytes``; 0 for a ``no_wait`` live branch, still copying), the daemon's
    timings per step (ms; names may change), and with ``fork`` the ``children``."""

    snapshot: N
    mode: str
    pause_ms: float
    captured_bytes: int
    timings: Dict[str, float]
    children: Optional[ForkResult[S]] = None

    def map(self, snapshot: Callable[[N], N2], sandbox: Callable[[S], S2]) -> BranchResult[N2, S2]:
        """The same result with its snapshot and children passed through the functions."""
        children = None if self.children is None else self.children.map(sandbox)
        return BranchResult(
            snapshot(self.snapshot),
            self.mode,
            self.pause_ms,
            self.captured_bytes,
            self.timings,
            children,
        )


def _typed(error: Any) -> ForkdError:
    """The exception of a wire error object (a failed child, an ``error`` event)."""
    return error_from_response(500, {"error": error})


def fork_result_of(client: Forkd, wire: Any) -> ForkResult[Sandbox]:
    """A wire ``ForkResult`` → live Sandboxes and typed failures."""
    return ForkResult(
        [Sandbox(client, from_wire(SandboxInfo, s)) for s in wire["sandboxes"]],
        [ForkFailure(f["index"], _typed(f["error"])) for f in wire["failed"]],
    )


def branch_sandbox(
    client: Forkd, sandbox_id: str, body: Dict[str, Any]
) -> BranchResult[Snapshot, Sandbox]:
    """POST /v1/sandboxes/:id/branch (``Sandbox.branch``)."""
    request = Request(
        "POST",
        f"/v1/sandboxes/{quote_segment(sandbox_id)}/branch",
        json=body,
        timeout=client.long_timeout,
    )
    wire = client.transport.json(request)
    children = wire.get("children")
    return BranchResult(
        snapshot=Snapshot(client, from_wire(SnapshotInfo, wire["snapshot"])),
        mode=wire["mode"],
        pause_ms=wire["pause_ms"],
        captured_bytes=wire["captured_bytes"],
        timings=wire.get("timings", {}),
        children=None if children is None else fork_result_of(client, children),
    )


def _snapshot_path(tag: str) -> str:
    return f"/v1/snapshots/{quote_segment(tag)}"


def _create_streamed(client: Forkd, body: Dict[str, Any], on_progress: OnProgress) -> Any:
    """A create that streams: progress to the callback, then the snapshot or its error."""
    request = Request("POST", "/v1/snapshots", json={**body, "stream": True})
    request.timeout = client.long_timeout
    for event in client.transport.send(request).lines():
        kind = event.get("type")
        if kind == "progress":
            on_progress(event["message"])
        elif kind == "done":
            return event["snapshot"]
        elif kind == "error":
            raise _typed(event["error"])
    raise InternalError(
        f"the create of snapshot {body['tag']} ended without its outcome; see `forkd snapshots`"
    )


class Snapshot(Remote[SnapshotInfo]):
    """A snapshot: a paused, warmed-up VM on disk under a tag, to fork sandboxes from::

        snap = Snapshot.create("warm", image="busybox", warm=["echo ready > /tmp/x"])
        result = snap.fork(3)
    """

    @property
    def tag(self) -> str:
        """Its tag."""
        return self._info.tag

    @property
    def _key(self) -> str:
        return self._info.tag

    @classmethod
    def create(
        cls,
        tag: str,
        *,
        image: Optional[str] = None,
        memory_mib: Optional[int] = None,
        cpus: Optional[int] = None,
        envs: Optional[Dict[str, str]] = None,
        warm: Optional[List[str]] = None,
        start: Optional[List[str]] = None,
        wait_for: Optional[str] = None,
        wait_port: Optional[int] = None,
        wait_timeout: Optional[float] = None,
        labels: Optional[Dict[str, str]] = None,
        network: Optional[str] = None,
        egress: Optional[Egress] = None,
        contexts: Optional[List[str]] = None,
        eval: Optional[List[str]] = None,
        on_fork: Optional[List[str]] = None,
        on_progress: Optional[OnProgress] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> Snapshot:
        """Boot a parent from ``image``, run the ``warm`` commands to completion (in order,
        ``sh -c``), start the ``start`` commands in the background, wait until ``wait_for``
        exits 0 or ``wait_port`` listens (``wait_timeout`` seconds at most), capture it under
        ``tag``. With ``on_progress`` the daemon reports each step as it goes. A failure
        leaves nothing under the tag (NameTakenError when it is taken). ``contexts`` starts
        Python code contexts in the parent and ``eval`` runs code in the first one (imports
        to keep warm), so every fork inherits them loaded; ``on_fork`` commands run in every
        child right after its restore. ``network``/``egress`` are the forks' defaults.

        ``snap = Snapshot.create("py", image="debian-py", warm=["python3 -c 'import numpy'"])``"""
        client = Forkd(url, token, request_timeout)
        body = compact(
            tag=tag,
            image=image,
            memory_mib=memory_mib,
            cpus=cpus,
            env=envs,
            warm=warm,
            start=start,
            wait_for=wait_for,
            wait_port=wait_port,
            wait_timeout_s=None if wait_timeout is None else whole_seconds(wait_timeout),
            labels=labels,
            network=network,
            egress=egress,
            contexts=contexts,
            eval=eval,
            on_fork=on_fork,
        )
        if on_progress is not None:
            wire = _create_streamed(client, body, on_progress)
        else:
            request = Request("POST", "/v1/snapshots", json=body, timeout=client.long_timeout)
            wire = client.transport.json(request)
        return cls(client, from_wire(SnapshotInfo, wire))

    @classmethod
    def get(
        cls,
        tag: str,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> Snapshot:
        """The snapshot with that tag; SnapshotNotFoundError when there is none."""
        client = Forkd(url, token, request_timeout)
        return cls(client, _get_info(client, tag))

    @staticmethod
    def list(
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> List[SnapshotInfo]:
        """Every snapshot the daemon has."""
        client = Forkd(url, token, request_timeout)
        wire = client.transport.json(Request("GET", "/v1/snapshots"))
        return [from_wire(SnapshotInfo, s) for s in wire["snapshots"]]

    def remove(
        self: Union[Snapshot, str],
        *,
        force: bool = False,
        cascade: bool = False,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> None:
        """Remove it (``Snapshot.remove(tag)`` by tag). SnapshotInUseError while sandboxes
        forked from it run, unless ``force`` (kills them), and while snapshots are built on
        it, unless ``cascade`` (removes them too)."""
        client, tag = target_of(self, Snapshot, url, token, request_timeout)
        query = {"force": force or None, "cascade": cascade or None}
        request = Request("DELETE", _snapshot_path(tag), query=query, timeout=client.long_timeout)
        client.transport.bytes(request)

    def refresh(self) -> SnapshotInfo:
        """Fetch its current state into ``info``."""
        self._info = _get_info(self._client, self.tag)
        return self._info

    def fork(
        self,
        n: int,
        *,
        labels: Optional[Dict[str, str]] = None,
        envs: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        all_or_nothing: Optional[bool] = None,
        egress: Optional[Egress] = None,
        limits: Optional[Limits] = None,
        idle: Optional[Idle] = None,
    ) -> ForkResult[Sandbox]:
        """Fork ``n`` (1–100) sandboxes from it, already warm. A child that fails does not
        fail the others: look at ``failed`` (with ``all_or_nothing`` the daemon then kills
        the healthy ones too). ``timeout`` (seconds) kills each child when it runs out.
        ``egress`` is merged over the snapshot's policy (``"none"``: offline children);
        ``limits`` overrides the ones the children inherit; ``idle`` is the children's idle
        policy (not inherited; docs/idle.md).

        ``result = snap.fork(10, labels={"run": "7"})``"""
        body = compact(
            snapshot=self.tag,
            n=n,
            labels=labels,
            env=envs,
            timeout_s=None if timeout is None else whole_seconds(timeout),
            all_or_nothing=all_or_nothing,
            egress=egress,
            limits=limits_body(limits),
            idle=idle_body(idle),
        )
        request = Request("POST", "/v1/sandboxes", json=body, timeout=self._client.long_timeout)
        return fork_result_of(self._client, self._client.transport.json(request))

    def fork_all(
        self,
        n: int,
        *,
        labels: Optional[Dict[str, str]] = None,
        envs: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        egress: Optional[Egress] = None,
        limits: Optional[Limits] = None,
        idle: Optional[Idle] = None,
    ) -> List[Sandbox]:
        """Fork ``n`` sandboxes, all or none: when any child fails the daemon kills the
        others and this raises the first failure's error."""
        result = self.fork(
            n,
            labels=labels,
            envs=envs,
            timeout=timeout,
            all_or_nothing=True,
            egress=egress,
            limits=limits,
            idle=idle,
        )
        if result.failed:
            raise result.failed[0].error
        return result.sandboxes

    def verify(self) -> VerifyReport:
        """Re-check its files against the sizes and checksums of its manifest."""
        path = f"{_snapshot_path(self.tag)}/verify"
        wire = self._client.transport.json(
            Request("POST", path, timeout=self._client.long_timeout)
        )
        return from_wire(VerifyReport, wire)

    def set_pool(self, size: int, *, prewarm: Optional[bool] = None) -> PoolInfo:
        """Keep ``size`` (0–64) VMMs pre-started for it, so forks skip QEMU's start (0: no
        pool). With ``prewarm`` each is also restored, run once and paused, so a fork costs
        a resume (the guest has then run ~0.1 s past the snapshot)."""
        body = compact(size=size, prewarm=prewarm)
        path = f"{_snapshot_path(self.tag)}/pool"
        pool = from_wire(PoolInfo, self._client.transport.json(Request("PUT", path, json=body)))
        self._info = replace(self._info, pool=pool)
        return pool

    def compact(self, to: str) -> Snapshot:
        """Flatten it (memory and disk, over all its ancestors) into a standalone snapshot
        under ``to``; this one stays."""
        request = Request(
            "POST",
            f"{_snapshot_path(self.tag)}/compact",
            json={"to": to},
            timeout=self._client.long_timeout,
        )
        wire = self._client.transport.json(request)
        return Snapshot(self._client, from_wire(SnapshotInfo, wire))


def _get_info(client: Forkd, tag: str) -> SnapshotInfo:
    return from_wire(SnapshotInfo, client.transport.json(Request("GET", _snapshot_path(tag))))
