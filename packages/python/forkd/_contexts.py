"""Code contexts from Python: ``sandbox.eval(code)`` runs code in a warm interpreter of
the sandbox that keeps its state between calls and is inherited by forks (docs/eval.md).
The answer follows E2B's ``Execution``/``Result``: rich results keyed by MIME type, logs,
and the code's error with its name, value and traceback (an exception is a result). With a
callback the eval streams (NDJSON events as the code runs); ``sandbox.contexts`` creates,
lists, restarts, interrupts and removes contexts; ``sandbox.eval_fork`` fans variants out
to children branched from the same state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from ._catalog import InternalError
from ._transport import Request, Transport, compact, quote_segment
from .errors import error_from_response

#: Seconds an eval may stay silent before the SDK gives up on the daemon, past the code's own
#: timeout (the daemon cuts a wedged interpreter 30 s after it).
EVAL_GRACE_S = 60.0
#: The daemon's default eval timeout (docs/eval.md), for the read timeout of a call without one.
DEFAULT_EVAL_TIMEOUT_MS = 300_000


@dataclass(frozen=True)
class Result:
    """One rich output: ``data`` maps MIME types to values (base64 for images)."""

    data: Dict[str, Any]
    is_main_result: bool

    def _str(self, mime: str) -> Optional[str]:
        value = self.data.get(mime)
        return value if isinstance(value, str) else None

    @property
    def text(self) -> Optional[str]:
        """text/plain: the value's repr."""
        return self._str("text/plain")

    @property
    def html(self) -> Optional[str]:
        return self._str("text/html")

    @property
    def svg(self) -> Optional[str]:
        return self._str("image/svg+xml")

    @property
    def png(self) -> Optional[str]:
        """image/png, base64."""
        return self._str("image/png")

    @property
    def json(self) -> Any:
        """application/json: the value itself when it has an exact JSON form."""
        return self.data.get("application/json")


@dataclass(frozen=True)
class ExecutionError:
    """What the code raised."""

    name: str
    value: str
    traceback: str


@dataclass(frozen=True)
class Execution:
    """What one ``eval`` gave."""

    results: List[Result] = field(default_factory=list)
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)
    error: Optional[ExecutionError] = None
    execution_count: int = 0
    duration_ms: float = 0.0

    @property
    def text(self) -> Optional[str]:
        """The main result's text/plain, if the cell ended with an expression."""
        return next((r.text for r in self.results if r.is_main_result), None)


OnText = Callable[[str], Any]
OnResult = Callable[[Result], Any]
OnError = Callable[[ExecutionError], Any]


@dataclass(frozen=True)
class EvalCallbacks:
    """What a streamed eval reports as the code runs (any of them makes it stream)."""

    on_stdout: Optional[OnText] = None
    on_stderr: Optional[OnText] = None
    on_result: Optional[OnResult] = None
    on_error: Optional[OnError] = None

    @property
    def streaming(self) -> bool:
        return any(f is not None for f in (self.on_stdout, self.on_stderr, self.on_result, self.on_error))


@dataclass(frozen=True)
class ContextInfo:
    """One code context as the daemon reports it."""

    name: str
    language: str
    cwd: str
    env: Dict[str, str]
    #: The interpreter's pid in the guest.
    pid: int
    created_at: str
    #: False when its process died inside the sandbox: restart it.
    alive: bool


@dataclass(frozen=True)
class EvalForkVariant:
    """One variant of a fan-out: the child it ran in and its Execution, or why it has none."""

    index: int
    sandbox: Optional[str]
    execution: Optional[Execution]
    #: ``{"code", "message", ...}`` when the child did not come up or the eval failed.
    failure: Optional[Dict[str, Any]]


@dataclass(frozen=True)
class EvalForkResult:
    """What ``eval_fork`` gave: one entry per variant, in order."""

    #: The branch the children were forked from (it stays: the source's disk layers on it).
    snapshot: str
    results: List[EvalForkVariant]


def _error_of(wire: Optional[Dict[str, Any]]) -> Optional[ExecutionError]:
    return ExecutionError(wire["name"], wire["value"], wire["traceback"]) if wire else None


def execution_of(wire: Dict[str, Any]) -> Execution:
    """An ``Execution`` from its wire object."""
    logs = wire.get("logs", {})
    return Execution(
        results=[Result(r["data"], r["is_main_result"]) for r in wire.get("results", [])],
        stdout=list(logs.get("stdout", [])),
        stderr=list(logs.get("stderr", [])),
        error=_error_of(wire.get("error")),
        execution_count=wire.get("execution_count", 0),
        duration_ms=wire.get("duration_ms", 0.0),
    )


def _read_timeout(transport: Transport, timeout_ms: Optional[int]) -> float:
    """An eval answers when its code ends: wait for the code's timeout and then some."""
    code_s = (timeout_ms if timeout_ms is not None else DEFAULT_EVAL_TIMEOUT_MS) / 1000
    return max(transport.config.request_timeout, code_s + EVAL_GRACE_S)


def eval_code(
    transport: Transport,
    base: str,
    code: str,
    context: Optional[str] = None,
    timeout_ms: Optional[int] = None,
    callbacks: EvalCallbacks = EvalCallbacks(),
) -> Execution:
    """POST /eval: buffered, or streamed when any callback is given."""
    body = compact(code=code, context=context, timeout_ms=timeout_ms)
    timeout = _read_timeout(transport, timeout_ms)
    if not callbacks.streaming:
        return execution_of(transport.json(Request("POST", f"{base}/eval", json=body, timeout=timeout)))
    response = transport.send(
        Request("POST", f"{base}/eval", json={**body, "stream": True}, timeout=timeout)
    )
    try:
        return _gather(response.lines(), callbacks)
    finally:
        # Leaving early (a callback raised, KeyboardInterrupt) drops the stream, which
        # interrupts the code in the guest.
        response.close()


def _gather(events: Any, cb: EvalCallbacks) -> Execution:
    """Events into an Execution, each handed to its callback as it comes."""
    results: List[Result] = []
    stdout: List[str] = []
    stderr: List[str] = []
    error: Optional[ExecutionError] = None
    for ev in events:
        kind = ev.get("type")
        if kind in ("stdout", "stderr"):
            (stdout if kind == "stdout" else stderr).append(ev["text"])
            fn = cb.on_stdout if kind == "stdout" else cb.on_stderr
            if fn is not None:
                fn(ev["text"])
        elif kind == "result":
            result = Result(ev["data"], ev["is_main_result"])
            results.append(result)
            if cb.on_result is not None:
                cb.on_result(result)
        elif kind == "error":
            error = _error_of(ev)
            if cb.on_error is not None and error is not None:
                cb.on_error(error)
        elif kind == "end":
            return Execution(results, stdout, stderr, error, ev["execution_count"], ev["duration_ms"])
        elif kind == "failed":
            raise error_from_response(500, ev)
    raise InternalError("the eval stream ended before the code finished; try again")


def eval_fork(
    transport: Transport,
    base: str,
    variants: List[str],
    context: Optional[str],
    timeout_ms: Optional[int],
    keep: Optional[bool],
    long_timeout: float,
) -> EvalForkResult:
    """POST /eval-fork and its results, in the order of the variants."""
    body = compact(variants=variants, context=context, timeout_ms=timeout_ms, keep=keep or None)
    timeout = max(long_timeout, _read_timeout(transport, timeout_ms))
    wire = transport.json(Request("POST", f"{base}/eval-fork", json=body, timeout=timeout))
    return EvalForkResult(
        snapshot=wire["snapshot"],
        results=[
            EvalForkVariant(
                index=r["index"],
                sandbox=r.get("sandbox"),
                execution=execution_of(r["execution"]) if r.get("execution") else None,
                failure=r.get("failure"),
            )
            for r in wire["results"]
        ],
    )


def _context_of(wire: Dict[str, Any]) -> ContextInfo:
    return ContextInfo(
        name=wire["name"],
        language=wire["language"],
        cwd=wire["cwd"],
        env=dict(wire.get("env", {})),
        pid=wire["pid"],
        created_at=wire["created_at"],
        alive=wire["alive"],
    )


class Contexts:
    """The code contexts of one sandbox (``sandbox.contexts``)::

        sbx.contexts.create(name="data", cwd="/tmp", envs={"MODE": "test"})
        sbx.eval("import os; os.getcwd()", context="data").text  # "'/tmp'"
    """

    def __init__(self, transport: Transport, base: str) -> None:
        self._transport = transport
        self._base = f"{base}/contexts"

    def _path(self, name: str, verb: str = "") -> str:
        return f"{self._base}/{quote_segment(name)}{verb}"

    def create(
        self,
        name: Optional[str] = None,
        *,
        cwd: Optional[str] = None,
        envs: Optional[Dict[str, str]] = None,
        language: Optional[str] = None,
    ) -> ContextInfo:
        """Start a context with its own process, cwd and environment: ``language``
        ``"python"`` (the default) or ``"node"``; the name defaults to the language, cwd to
        ``/root``. NameTakenError when one of that name runs."""
        body = compact(name=name, language=language, cwd=cwd, env=envs)
        return _context_of(self._transport.json(Request("POST", self._base, json=body)))

    def list(self) -> List[ContextInfo]:
        """Every context of the sandbox, with its pid and whether its process is alive."""
        return [_context_of(c) for c in self._transport.json(Request("GET", self._base))]

    def restart(self, name: str) -> ContextInfo:
        """Replace the interpreter: fresh state, same cwd and env."""
        return _context_of(self._transport.json(Request("POST", self._path(name, "/restart"))))

    def interrupt(self, name: str) -> None:
        """Interrupt the code running in it (KeyboardInterrupt); the context lives on."""
        self._transport.bytes(Request("POST", self._path(name, "/interrupt")))

    def remove(self, name: str) -> None:
        """End it and forget its state; ContextNotFoundError when there is none."""
        self._transport.bytes(Request("DELETE", self._path(name)))
