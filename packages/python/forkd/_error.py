"""The base of every forkd exception: a stable catalog code, its HTTP status, a message
that says what to do next, and optional structured details (docs/errors.md). The class per
code lives in the generated ``_catalog.py``; this module only holds what they share."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional


class CatalogEntry(NamedTuple):
    """One code of the catalog: its HTTP status and a one-line meaning."""

    status: int
    meaning: str


class ForkdError(Exception):
    """An error from forkd: the daemon's error answers, and the SDK's own (daemon unreachable).

    Every catalog code has a subclass named after it (``sandbox_not_found`` →
    ``SandboxNotFoundError``); catch those, or this class and look at ``code``::

        try:
            Sandbox.connect("sbx-000000000000")
        except SandboxNotFoundError:
            ...
        except ForkdError as e:
            print(e.code, e.status, e.details)
    """

    #: The catalog code (program against it, never against the message).
    code: str = "internal"
    #: The HTTP status the catalog maps the code to.
    status: int = 500

    def __new__(
        cls,
        message: str,
        details: Optional[Dict[str, Any]] = None,
        *,
        retry_after: Optional[float] = None,
    ) -> ForkdError:
        # Some subclasses also extend OSError (TimeoutError, ConnectionError), whose
        # constructor reads a second argument as an errno: hand it the message alone.
        return super().__new__(cls, message)  # type: ignore[call-arg] # BaseException takes it

    def __init__(
        self,
        message: str,
        details: Optional[Dict[str, Any]] = None,
        *,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        #: What happened and what to do next, for people.
        self.message = message
        #: Structured context from the daemon (``{"field": "body.cpus", ...}``), or None.
        self.details = details
        #: Seconds to wait before trying again, from a 503's ``Retry-After`` header.
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> Dict[str, Any]:
        """The wire form: ``{"error": {"code", "message", "details"}}``."""
        error: Dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}
