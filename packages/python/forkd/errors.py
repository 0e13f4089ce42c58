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


#: The generic code of an HTTP status, as the TS SDK picks it (else ``internal``).
_CODE_FOR_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "unauthorized",
    404: "not_found",
    413: "payload_too_large",
    415: "unsupported_media_type",
    503: "capacity",
    504: "timeout",
}


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
    code = wire_code if known and wire_code is not None else _CODE_FOR_STATUS.get(status, "internal")
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
