"""forkd — the Python client of the forkd daemon: sandboxes that are QEMU microVMs, forked
warm from snapshots, branched while they run. Standard library only (Python 3.9+).

    from forkd import Sandbox, Snapshot

    with Sandbox.create(image="busybox") as sbx:
        print(sbx.commands.run("echo hi").stdout)

    snap = Snapshot.create("warm", image="busybox", warm=["touch /ready"])
    result = snap.fork(4)

``AsyncSandbox`` / ``AsyncSnapshot`` / ``AsyncForkd`` are the same surface for asyncio.
See docs/python.md.
"""

from ._async import (
    AsyncCommandHandle,
    AsyncCommands,
    AsyncFiles,
    AsyncFileStream,
    AsyncForkd,
    AsyncImages,
    AsyncBuilds,
    AsyncPacks,
    AsyncSandbox,
    AsyncSnapshot,
)
from ._client import Forkd, Images
from ._packs import Packs
from ._builds import Builds
from ._commands import CommandHandle, Commands
from ._config import ConnectionConfig, default_socket_path, parse_url, resolve_config
from ._contexts import (
    ContextInfo,
    Contexts,
    EvalForkResult,
    EvalForkVariant,
    Execution,
    ExecutionError,
    Result,
)
from ._pty import Pty, PtyDetachedError, PtyExit, PtyHandle, PtySessionInfo
from ._async import AsyncContexts, AsyncPty, AsyncPtyHandle
from ._files import Files, FileStream
from ._sandbox import Sandbox
from ._snapshots import BranchResult, ForkFailure, ForkResult, Snapshot
from ._types import (
    CommandResult,
    EntryInfo,
    ImageInfo,
    InstallInfo,
    LineageEdge,
    LineageNode,
    PackInfo,
    PoolBudgetInfo,
    PoolInfo,
    PushInfo,
    SandboxInfo,
    SnapshotFileInfo,
    SnapshotInfo,
    SnapshotMemoryInfo,
    VerifyProblem,
    VerifyReport,
    VersionInfo,
    WriteInfo,
)
from ._version import VERSION
from . import _catalog
from ._catalog import *  # noqa: F401,F403 (one exception class per catalog code)
from ._error import CatalogEntry, ForkdError
from .errors import error_from_response

__version__ = VERSION

__all__ = [
    "AsyncCommandHandle",
    "AsyncCommands",
    "AsyncFiles",
    "AsyncFileStream",
    "AsyncForkd",
    "AsyncImages",
    "AsyncBuilds",
    "AsyncPacks",
    "AsyncSandbox",
    "AsyncSnapshot",
    "BranchResult",
    "CommandHandle",
    "CommandResult",
    "Commands",
    "ConnectionConfig",
    "EntryInfo",
    "Files",
    "FileStream",
    "ForkFailure",
    "ForkResult",
    "Forkd",
    "ImageInfo",
    "Images",
    "InstallInfo",
    "LineageEdge",
    "LineageNode",
    "PackInfo",
    "Builds",
    "Packs",
    "PoolBudgetInfo",
    "PoolInfo",
    "PushInfo",
    "Sandbox",
    "SandboxInfo",
    "Snapshot",
    "SnapshotFileInfo",
    "SnapshotInfo",
    "SnapshotMemoryInfo",
    "VERSION",
    "VerifyProblem",
    "VerifyReport",
    "VersionInfo",
    "WriteInfo",
    "default_socket_path",
    "parse_url",
    "resolve_config",
]
__all__ += ["CatalogEntry", "ForkdError", "error_from_response"]
__all__ += ["Execution", "ExecutionError", "Result"]
__all__ += ["ContextInfo", "Contexts", "EvalForkResult", "EvalForkVariant"]
__all__ += ["Pty", "PtyDetachedError", "PtyExit", "PtyHandle", "PtySessionInfo"]
__all__ += ["AsyncContexts", "AsyncPty", "AsyncPtyHandle"]
__all__ += _catalog.__all__
