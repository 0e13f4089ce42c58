"""forkd's exceptions: ``ForkdError`` and one subclass per catalog code (generated into
``_catalog.py`` from the TypeScript SDK's catalog), and the mapping of an error answer to
its class. A code this SDK does not know (a newer daemon, a proxy's page) becomes the
nearest generic class by HTTP status, with the original code kept in ``details``."""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _catalog
from ._catalog import *  # noqa: F401,F403 (the classes, re-exported by name)
from ._catalog import ERROR_CATALOG, ERROR_CLASSES
from ._error import CatalogEntry, ForkdError

__all__ = ["CatalogEntry", "ForkdError", "error_from_response"]
__all__ += _catalog.__all__


def _code_for_status(status: int) -> str:
    """The generic code of an HTTP status, as the TS SDK picks it."""
    if status == 400:
        return "bad_request"
    if status == 413:
        return "payload_too_large"
    if status == 415:
        return "unsupported_media_type"
    if status in (401, 403):
        return "unauthorized"
    if status == 404:
        return "not_found"
    if status == 503:
        return "capacity"
    if status == 504:
        return "timeout"
    return "internal"


def error_from_response(
    status: int, body: Any, retry_after: Optional[float] = None
) -> ForkdError:
    """The typed exception of an error answer: its ``{"error": {code, message, details}}``
    body, or for a body that is none, a generic class chosen by HTTP status.

    >>> type(error_from_response(404, {"error": {"code": "sandbox_not_found", "message": "no"}}))
    <class 'forkd._catalog.SandboxNotFoundError'>
    """
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    wire_code = error.get("code") if isinstance(error.get("code"), str) else None
    known = wire_code in ERROR_CATALOG
    code = wire_code if known and wire_code is not None else _code_for_status(status)
    message = error.get("message")
    if not isinstance(message, str):
        message = f"the forkd daemon answered HTTP {status}"
    details: Optional[Dict[str, Any]] = (
        error["details"] if isinstance(error.get("details"), dict) else None
    )
    if wire_code is not None and not known:
        # Keep what a newer daemon said, so nothing is lost.
        details = {**(details or {}), "code": wire_code, "status": status}
    return ERROR_CLASSES[code](message, details, retry_after=retry_after)
