"""``Sandbox``: create (boot from an image, or fork from a snapshot), connect to, list and
kill sandboxes, the ``commands`` and ``files`` of one, branching it into a snapshot, and
pausing it (``pause``/``resume``, docs/idle.md).
Calls that name a sandbox work both on the class with an id (``Sandbox.kill(id)``) and on
an instance (``sbx.kill()``), as in the TS and E2B SDKs; ``with`` kills it at the end."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Union

from ._catalog import SandboxNotFoundError
from ._client import Forkd, Remote, target_of
from ._commands import Commands
from ._contexts import (
    Contexts,
    EvalCallbacks,
    EvalForkResult,
    Execution,
    OnError,
    OnResult,
    OnText,
    eval_fork,
    eval_code,
)
from ._files import Files
from ._pty import Pty
from ._transport import Request, compact, quote_segment
from ._types import SandboxInfo, from_wire

if TYPE_CHECKING:
    from ._snapshots import BranchResult, Snapshot


def sandbox_path(sandbox_id: str) -> str:
    """``/v1/sandboxes/ID``."""
    return f"/v1/sandboxes/{quote_segment(sandbox_id)}"


def whole_seconds(seconds: float) -> int:
    """Seconds as the daemon counts them, rounded up so a timeout is never shorter."""
    return math.ceil(seconds)


#: An egress policy: ``"none"`` (nothing out, DNS refused) or a dict of ``allow_internet``,
#: ``allow_out`` and ``deny_out`` (docs/network.md); fields left out are inherited.
Egress = Union[str, Mapping[str, Any]]
#: Resource limits: ``{"memory": "768M" or bytes, "cpu": 0.5, "pids": 128}`` (docs/limits.md).
Limits = Mapping[str, Any]


#: An idle policy: ``{"pause_after_s": 60, "hibernate_after_s": 900}`` (docs/idle.md); a key
#: left out takes the daemon's default on a create or fork and keeps its value on
#: ``set_idle``; 0 or None is never.
Idle = Mapping[str, Optional[float]]


def idle_body(idle: Optional[Idle]) -> Optional[Dict[str, Optional[int]]]:
    """An idle policy as the daemon takes it: whole seconds, rounded up (0 and None stay)."""
    if idle is None:
        return None
    return {k: None if v is None else whole_seconds(v) for k, v in idle.items()}


def limits_body(limits: Optional[Limits]) -> Optional[Dict[str, Any]]:
    """Limits as the daemon takes them (a memory size in bytes becomes its string)."""
    if limits is None:
        return None
    body = dict(limits)
    if isinstance(body.get("memory"), int):
        body["memory"] = str(body["memory"])
    return body


class Sandbox(Remote[SandboxInfo]):
    """A running microVM sandbox::

        with Sandbox.create(image="busybox") as sbx:
            print(sbx.commands.run("echo hello").stdout)
        # killed here
    """

    def __init__(self, client: Forkd, info: SandboxInfo) -> None:
        """Not for direct use: ``Sandbox.create`` / ``Sandbox.connect`` make them."""
        super().__init__(client, info)
        base = sandbox_path(info.id)
        #: Run commands in it.
        self.commands = Commands(client.transport, base)
        #: Read and write its files.
        self.files = Files(client.transport, base)
        #: Its code contexts (warm interpreters).
        self.contexts = Contexts(client.transport, base)
        #: Its terminal sessions.
        self.pty = Pty(client.transport, base)

    @property
    def id(self) -> str:
        """Its id, like ``sbx-0123456789ab``."""
        return self._info.id

    #: Its id, under E2B's name for it.
    sandbox_id = id

    @property
    def _key(self) -> str:
        return self._info.id

    @classmethod
    def create(
        cls,
        image: Optional[str] = None,
        *,
        snapshot: Optional[str] = None,
        memory_mib: Optional[int] = None,
        cpus: Optional[int] = None,
        envs: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        labels: Optional[Dict[str, str]] = None,
        network: Optional[str] = None,
        egress: Optional[Egress] = None,
        limits: Optional[Limits] = None,
        idle: Optional[Idle] = None,
        cold: Optional[bool] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> Sandbox:
        """Boot a new sandbox from ``image`` (default: the daemon's), or fork one from
        ``snapshot`` (already warm; it then takes the snapshot's image, memory and cpus), and
        return once it answers. ``timeout`` (seconds) kills it when it runs out; ``envs`` is
        the environment of every command in it. ``network`` is ``"nat"`` or ``"none"``;
        ``egress`` ``"none"`` or ``{"allow_internet": False, "allow_out": [...]}``;
        ``limits`` ``{"memory": "768M", "cpu": 0.5, "pids": 128}``; ``idle``
        ``{"pause_after_s": 60, "hibernate_after_s": 900}`` pauses it when nobody uses it (a
        fork does not inherit it; left out: the daemon's defaults). A start from an image
        forks the image's boot snapshot; ``cold=True`` boots its kernel instead.

        ``sbx = Sandbox.create(image="busybox", memory_mib=512, timeout=600, labels={"job": "7"})``"""
        client = Forkd(url, token, request_timeout)
        body = compact(
            image=image,
            snapshot=snapshot,
            memory_mib=memory_mib,
            cpus=cpus,
            env=envs,
            timeout_s=None if timeout is None else whole_seconds(timeout),
            labels=labels,
            network=network,
            egress=egress,
            limits=limits_body(limits),
            idle=idle_body(idle),
            cold=cold,
        )
        request = Request("POST", "/v1/sandboxes", json=body, timeout=client.long_timeout)
        return cls(client, from_wire(SandboxInfo, client.transport.json(request)))

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> Sandbox:
        """Attach to an existing sandbox; SandboxNotFoundError when there is none."""
        client = Forkd(url, token, request_timeout)
        return cls(client, _get_info(client, sandbox_id))

    @staticmethod
    def list(
        *,
        state: Optional[str] = None,
        label: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> List[SandboxInfo]:
        """The sandboxes the daemon knows, optionally only those in ``state`` and with the
        label ``label="key=value"``."""
        client = Forkd(url, token, request_timeout)
        query = {"state": state, "label": label}
        wire = client.transport.json(Request("GET", "/v1/sandboxes", query=query))
        return [from_wire(SandboxInfo, s) for s in wire["sandboxes"]]

    def kill(
        self: Union[Sandbox, str],
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> None:
        """Kill it: its VM ends and its files are gone. ``Sandbox.kill(id)`` kills one by
        id; SandboxNotFoundError when there is none."""
        client, sandbox_id = _target(self, url, token, request_timeout)
        client.transport.bytes(Request("DELETE", sandbox_path(sandbox_id)))

    def set_timeout(
        self: Union[Sandbox, str],
        timeout: float,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> SandboxInfo:
        """Make it expire ``timeout`` seconds from now (rounded up to whole seconds).
        ``Sandbox.set_timeout(id, 600)`` works by id."""
        return _patch(self, {"timeout_s": whole_seconds(timeout)}, url, token, request_timeout)

    def set_limits(
        self: Union[Sandbox, str],
        limits: Limits,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> SandboxInfo:
        """Change its resource limits while it runs (``{"cpu": 0.25}``); limits left out
        keep their value. ``Sandbox.set_limits(id, {...})`` works by id."""
        body = {"limits": limits_body(limits)}
        return _patch(self, body, url, token, request_timeout)

    def set_idle(
        self: Union[Sandbox, str],
        idle: Optional[Idle],
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> SandboxInfo:
        """Change when it pauses itself (docs/idle.md), at once: ``{"pause_after_s": 30}``;
        times left out keep their value, 0 or None is never; ``None`` for the whole policy
        makes it follow the daemon's defaults again. A paused sandbox stays paused and the
        new times count from now. ``Sandbox.set_idle(id, {...})`` works by id."""
        return _patch(self, {"idle": idle_body(idle)}, url, token, request_timeout)

    def pause(
        self: Union[Sandbox, str],
        tier: Optional[str] = None,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> SandboxInfo:
        """Pause it (docs/idle.md): ``"paused"`` (default) stops its VM, so it uses no CPU;
        ``"hibernated"`` puts it on disk and ends its VM, so it uses no memory either;
        ``"halted"`` keeps only its disk (its guest syncs, its VM ends) and its wake is a cold
        boot on that disk. Any request wakes it; ``info.tier`` says where it is.
        ``Sandbox.pause(id)`` works by id.

        ``sbx.pause(tier="hibernated")``"""
        return _tier_move(self, "pause", compact(tier=tier), url, token, request_timeout)

    def resume(
        self: Union[Sandbox, str],
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> SandboxInfo:
        """Wake it ahead of its next request (a no-op when it runs); from hibernated this
        restores it under the same id. ``Sandbox.resume(id)`` works by id."""
        return _tier_move(self, "resume", None, url, token, request_timeout)

    def logs(
        self: Union[Sandbox, str],
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> str:
        """Its VM console log (kernel and agent messages); read it when a boot fails."""
        client, sandbox_id = _target(self, url, token, request_timeout)
        data = client.transport.bytes(Request("GET", f"{sandbox_path(sandbox_id)}/logs"))
        return data.decode(errors="replace")

    def branch(
        self: Union[Sandbox, str],
        *,
        tag: Optional[str] = None,
        fork: Optional[int] = None,
        labels: Optional[Dict[str, str]] = None,
        no_wait: Optional[bool] = None,
        mode: Optional[str] = None,
        idle: Optional[Idle] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> BranchResult[Snapshot, Sandbox]:
        """Capture it — memory, devices and disk from one instant — into a new snapshot
        while it keeps running (paused for ``pause_ms``). With ``fork=N``, N children of the
        new snapshot start in the same call (``idle``: their idle policy, docs/idle.md).
        ``mode`` is ``"copy"`` or ``"live"`` (default: the daemon's); ``no_wait`` answers
        once it resumed, the snapshot still ``writing``.

        ``result = sbx.branch(tag="step-3", fork=3)``"""
        from ._snapshots import branch_sandbox

        client, sandbox_id = _target(self, url, token, request_timeout)
        body = compact(tag=tag, fork=fork, labels=labels, no_wait=no_wait, mode=mode, idle=idle_body(idle))
        return branch_sandbox(client, sandbox_id, body)

    def eval(
        self,
        code: str,
        *,
        context: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[OnText] = None,
        on_stderr: Optional[OnText] = None,
        on_result: Optional[OnResult] = None,
        on_error: Optional[OnError] = None,
    ) -> Execution:
        """Run code in a warm interpreter of the sandbox (default context ``python``, made
        on first use) that keeps its state between calls; forks inherit it. With any
        ``on_…`` callback the eval streams: each is called as the code prints or yields a
        result; a callback that raises stops the eval (the code is interrupted).

        ``sbx.eval("import numpy; numpy.arange(4).sum()").text  # '6'``"""
        callbacks = EvalCallbacks(on_stdout, on_stderr, on_result, on_error)
        return eval_code(
            self._client.transport, sandbox_path(self.id), code, context, timeout_ms, callbacks
        )

    #: ``eval`` under the name E2B's code interpreter uses, kept as an alias (docs/eval.md).
    run_code = eval

    def eval_fork(
        self,
        variants: List[str],
        *,
        context: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        keep: Optional[bool] = None,
    ) -> EvalForkResult:
        """Fan-out: branch the sandbox into one child per variant, run variant *i* in child
        *i* (each inherits the contexts' state) and return all results in order. The
        children are killed afterwards unless ``keep``.

        ``[r.execution.text for r in sbx.eval_fork(["f(1)", "f(2)"]).results]``"""
        return eval_fork(
            self._client.transport,
            sandbox_path(self.id),
            variants,
            context,
            timeout_ms,
            keep,
            self._client.long_timeout,
        )

    def refresh(self) -> SandboxInfo:
        """Fetch its current state into ``info``."""
        self._info = _get_info(self._client, self.id)
        return self._info

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        kill_quietly(self)


def kill_quietly(sandbox: Sandbox) -> None:
    """Kill a sandbox at the end of a ``with``: one already gone is not an error."""
    try:
        sandbox.kill()
    except SandboxNotFoundError:
        pass


def _target(
    target: Union[Sandbox, str],
    url: Optional[str],
    token: Optional[str],
    request_timeout: Optional[float],
) -> Tuple[Forkd, str]:
    return target_of(target, Sandbox, url, token, request_timeout)


def _get_info(client: Forkd, sandbox_id: str) -> SandboxInfo:
    wire = client.transport.json(Request("GET", sandbox_path(sandbox_id)))
    return from_wire(SandboxInfo, wire)


def _patch(
    self: Union[Sandbox, str],
    body: Dict[str, Any],
    url: Optional[str],
    token: Optional[str],
    request_timeout: Optional[float],
) -> SandboxInfo:
    """PATCH the sandbox; a Sandbox object keeps the answer as its info."""
    client, sandbox_id = _target(self, url, token, request_timeout)
    return _keep(self, client.transport.json(Request("PATCH", sandbox_path(sandbox_id), json=body)))


def _tier_move(
    self: Union[Sandbox, str],
    verb: str,
    body: Optional[Dict[str, Any]],
    url: Optional[str],
    token: Optional[str],
    request_timeout: Optional[float],
) -> SandboxInfo:
    """POST /pause or /resume (a hibernation or its wake takes seconds: the long timeout)."""
    client, sandbox_id = _target(self, url, token, request_timeout)
    path = f"{sandbox_path(sandbox_id)}/{verb}"
    request = Request("POST", path, json=body, timeout=client.long_timeout)
    return _keep(self, client.transport.json(request))


def _keep(self: Union[Sandbox, str], wire: Any) -> SandboxInfo:
    """The Sandbox an answer describes; a Sandbox object keeps it as its info."""
    info = from_wire(SandboxInfo, wire)
    if isinstance(self, Sandbox):
        self._info = info
    return info
