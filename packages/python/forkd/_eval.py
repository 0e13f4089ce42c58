"""Code contexts from Python: ``sandbox.run_code(code)`` runs code in a warm interpreter of
the sandbox that keeps its state between calls and is inherited by forks (docs/eval.md).
The answer follows E2B's ``Execution``/``Result``: rich results keyed by MIME type, logs,
and the code's error with its name, value and traceback (an exception is a result)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._transport import Request, Transport


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
    """What one ``run_code`` gave."""

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


def run_code(
    transport: Transport,
    base: str,
    code: str,
    context: Optional[str] = None,
    timeout_ms: Optional[int] = None,
) -> Execution:
    """POST /eval (buffered) and the Execution it answers."""
    body: Dict[str, Any] = {"code": code}
    if context is not None:
        body["context"] = context
    if timeout_ms is not None:
        body["timeout_ms"] = timeout_ms
    wire = transport.json(Request("POST", f"{base}/eval", json=body))
    error = wire.get("error")
    return Execution(
        results=[Result(r["data"], r["is_main_result"]) for r in wire.get("results", [])],
        stdout=list(wire.get("logs", {}).get("stdout", [])),
        stderr=list(wire.get("logs", {}).get("stderr", [])),
        error=ExecutionError(error["name"], error["value"], error["traceback"]) if error else None,
        execution_count=wire.get("execution_count", 0),
        duration_ms=wire.get("duration_ms", 0.0),
    )
