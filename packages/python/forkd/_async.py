"""The asyncio SDK: ``AsyncSandbox``, ``AsyncSnapshot``, ``AsyncForkd`` and their parts,
the same surface as the sync SDK and run by the same sync core, each blocking call on a
thread of its own (``_offload.py``). Callbacks (``on_stdout``, ``on_progress``, …) run on
the caller's event loop and may be coroutine functions: output waits until they are done,
as in the TS SDK.

Most methods are descriptors over their sync twin (``kill = dual(Sandbox.kill)``), typed
with ParamSpec so they take exactly the sync method's arguments."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Dict,
    Generic,
    Iterator,
    List,
    Literal,
    Optional,
    Type,
    Union,
    overload,
)

from ._catalog import SandboxNotFoundError
from ._client import Forkd, I, Images, Remote
from ._packs import Packs
from ._builds import Builds
from ._commands import (
    Cmd,
    CommandHandle,
    Commands,
    OnOutput,
    OnText,
    check_foreground,
    spec_and_output,
)
from ._contexts import Contexts
from ._files import Files, FileStream
from ._offload import dual, method, offload, on_loop, static
from ._pty import Pty, PtyHandle
from ._sandbox import Sandbox
from ._snapshots import BranchResult, ForkResult, Snapshot
from ._types import CommandResult, SandboxInfo, SnapshotInfo


# ---- results of the sync core, as the async SDK's own --------------------------------


def _sandbox(sync: Sandbox) -> AsyncSandbox:
    return AsyncSandbox(sync)


def _snapshot(sync: Snapshot) -> AsyncSnapshot:
    return AsyncSnapshot(sync)


def _fork(result: ForkResult[Sandbox]) -> ForkResult[AsyncSandbox]:
    return result.map(_sandbox)


def _sandboxes(sandboxes: List[Sandbox]) -> List[AsyncSandbox]:
    return [AsyncSandbox(s) for s in sandboxes]


def _branch(result: BranchResult[Snapshot, Sandbox]) -> BranchResult[AsyncSnapshot, AsyncSandbox]:
    return result.map(_snapshot, _sandbox)


# ---- the classes ---------------------------------------------------------------------


class AsyncCommandHandle:
    """A running command, for asyncio: the same calls as ``CommandHandle``, awaited."""

    def __init__(self, sync: CommandHandle) -> None:
        #: The sync handle it drives.
        self.sync = sync
        #: The exec id the daemon gave this command.
        self.exec_id = sync.exec_id
        #: The command's pid inside the guest.
        self.pid = sync.pid

    wait = method(CommandHandle.wait)
    kill = method(CommandHandle.kill)
    send_stdin = method(CommandHandle.send_stdin)
    close_stdin = method(CommandHandle.close_stdin)
    disconnect = method(CommandHandle.disconnect)


class AsyncCommands:
    """The commands of one sandbox (``sandbox.commands``), for asyncio."""

    def __init__(self, sync: Commands) -> None:
        #: The sync commands it drives.
        self.sync = sync

    @overload
    async def run(
        self,
        cmd: Cmd,
        *,
        background: Literal[False] = False,
        envs: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: Optional[Union[str, bytes]] = None,
        on_stdout: Optional[OnText] = None,
        on_stderr: Optional[OnText] = None,
        on_output: Optional[OnOutput] = None,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        cmd: Cmd,
        *,
        background: Literal[True],
        envs: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: Optional[Union[str, bytes]] = None,
        keep_stdin_open: bool = False,
        on_stdout: Optional[OnText] = None,
        on_stderr: Optional[OnText] = None,
        on_output: Optional[OnOutput] = None,
    ) -> AsyncCommandHandle: ...

    async def run(
        self, cmd: Cmd, *, background: bool = False, **options: Any
    ) -> Union[CommandResult, AsyncCommandHandle]:
        """``Commands.run``, awaited; callbacks run on this event loop (coroutine functions
        are awaited). Cancelling the task of a streamed command kills the command."""
        loop = asyncio.get_running_loop()
        spec, output = spec_and_output(cmd, options, lambda callback: on_loop(loop, callback))
        if background:
            handle = await offload(lambda: self.sync.open(spec, output).in_background())
            return AsyncCommandHandle(handle)
        check_foreground(spec)
        if not output.streaming:
            return await offload(lambda: self.sync.buffered(spec))
        streaming = await offload(lambda: self.sync.open(spec, output))
        return await offload(streaming.wait, on_cancel=streaming.disconnect)


class AsyncFileStream:
    """A file's contents as they arrive, for asyncio: ``async for chunk in stream``."""

    def __init__(self, sync: FileStream) -> None:
        self._sync = sync
        self._chunks: Iterator[bytes] = iter(sync)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        # StopIteration cannot cross a future: the worker hands back None at the end.
        chunk = await offload(lambda: next(self._chunks, None))
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        """Stop reading (the rest is not downloaded)."""
        await offload(self._sync.close)

    async def __aenter__(self) -> AsyncFileStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncFiles:
    """The files of one sandbox (``sandbox.files``), for asyncio."""

    def __init__(self, sync: Files) -> None:
        #: The sync files it drives.
        self.sync = sync

    @overload
    async def read(self, path: str, format: Literal["text"] = "text") -> str: ...

    @overload
    async def read(self, path: str, format: Literal["bytes"]) -> bytes: ...

    @overload
    async def read(self, path: str, format: Literal["stream"]) -> AsyncFileStream: ...

    async def read(self, path: str, format: str = "text") -> Union[str, bytes, AsyncFileStream]:
        """``Files.read``, awaited; ``format="stream"`` gives an ``AsyncFileStream``."""
        data: Any = await offload(lambda: self.sync.read(path, format))  # type: ignore[call-overload]
        return AsyncFileStream(data) if isinstance(data, FileStream) else data

    write = method(Files.write)
    list = method(Files.list)
    stat = method(Files.stat)
    exists = method(Files.exists)
    make_dir = method(Files.make_dir)
    remove = method(Files.remove)


class AsyncContexts:
    """The code contexts of one sandbox (``sandbox.contexts``), for asyncio."""

    def __init__(self, sync: Contexts) -> None:
        #: The sync contexts it drives.
        self.sync = sync

    create = method(Contexts.create)
    list = method(Contexts.list)
    restart = method(Contexts.restart)
    interrupt = method(Contexts.interrupt)
    remove = method(Contexts.remove)


class AsyncPtyHandle:
    """One attachment to a terminal session, for asyncio: the same calls as ``PtyHandle``,
    awaited; ``on_data`` runs on the event loop (the reader waits for it)."""

    def __init__(self, sync: PtyHandle) -> None:
        #: The sync handle it drives.
        self.sync = sync

    @property
    def session(self) -> str:
        """Its id, ``pty-N``: keep it to reattach."""
        return self.sync.session

    @property
    def pid(self) -> int:
        return self.sync.pid

    @property
    def offset(self) -> int:
        """Bytes of output received so far (session-wide): ``since`` for a reattach."""
        return self.sync.offset

    send_input = method(PtyHandle.send_input)
    resize = method(PtyHandle.resize)
    signal = method(PtyHandle.signal)
    kill = method(PtyHandle.kill)
    wait = method(PtyHandle.wait)
    disconnect = method(PtyHandle.disconnect)


def _pty_handle(sync: PtyHandle) -> AsyncPtyHandle:
    return AsyncPtyHandle(sync)


class AsyncPty:
    """The terminal sessions of one sandbox (``sandbox.pty``), for asyncio."""

    def __init__(self, sync: Pty) -> None:
        #: The sync sessions it drives.
        self.sync = sync

    create = method(Pty.create, _pty_handle)
    connect = method(Pty.connect, _pty_handle)
    list = method(Pty.list)


class _AsyncRemote(Generic[I]):
    """What AsyncSandbox and AsyncSnapshot share: the sync twin they drive (``sync``) and
    what was last heard of it."""

    def __init__(self, sync: Remote[I]) -> None:
        self._remote = sync

    def __repr__(self) -> str:
        return f"Async{self._remote!r}"

    @property
    def info(self) -> I:
        """What was last heard of it."""
        return self._remote.info


class AsyncSandbox(_AsyncRemote[SandboxInfo]):
    """A running microVM sandbox, for asyncio::

        async with await AsyncSandbox.create(image="busybox") as sbx:
            print((await sbx.commands.run("echo hello")).stdout)
    """

    def __init__(self, sync: Sandbox) -> None:
        """Not for direct use: ``AsyncSandbox.create`` / ``connect`` make them."""
        super().__init__(sync)
        #: The sync sandbox it drives.
        self.sync = sync
        #: Run commands in it.
        self.commands = AsyncCommands(sync.commands)
        #: Read and write its files.
        self.files = AsyncFiles(sync.files)
        #: Its code contexts.
        self.contexts = AsyncContexts(sync.contexts)
        #: Its terminal sessions.
        self.pty = AsyncPty(sync.pty)

    @property
    def id(self) -> str:
        """Its id, like ``sbx-0123456789ab``."""
        return self.sync.id

    #: Its id, under E2B's name for it.
    sandbox_id = id

    create = static(Sandbox.create, _sandbox)
    connect = static(Sandbox.connect, _sandbox)
    list = static(Sandbox.list)
    kill = dual(Sandbox.kill)
    set_timeout = dual(Sandbox.set_timeout)
    set_limits = dual(Sandbox.set_limits)
    set_idle = dual(Sandbox.set_idle)
    pause = dual(Sandbox.pause)
    resume = dual(Sandbox.resume)
    logs = dual(Sandbox.logs)
    branch = dual(Sandbox.branch, _branch)
    refresh = method(Sandbox.refresh)
    #: ``Sandbox.eval``, awaited; ``on_…`` callbacks run on this loop. Cancelling the
    #: task does not stop the code: ``await sbx.contexts.interrupt(name)`` does.
    eval = method(Sandbox.eval)
    #: ``eval`` under its E2B name, kept as an alias.
    run_code = eval
    eval_fork = method(Sandbox.eval_fork)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self,
        kind: Optional[Type[BaseException]],
        error: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            await self.kill()
        except SandboxNotFoundError:
            pass


class AsyncSnapshot(_AsyncRemote[SnapshotInfo]):
    """A snapshot, for asyncio: the same calls as ``Snapshot``, awaited; forks and
    branches hand back ``AsyncSandbox`` and ``AsyncSnapshot`` objects."""

    def __init__(self, sync: Snapshot) -> None:
        """Not for direct use: ``AsyncSnapshot.create`` / ``get`` make them."""
        super().__init__(sync)
        #: The sync snapshot it drives.
        self.sync = sync

    @property
    def tag(self) -> str:
        """Its tag."""
        return self.sync.tag

    create = static(Snapshot.create, _snapshot)
    get = static(Snapshot.get, _snapshot)
    list = static(Snapshot.list)
    remove = dual(Snapshot.remove)
    refresh = method(Snapshot.refresh)
    fork = method(Snapshot.fork, _fork)
    fork_all = method(Snapshot.fork_all, _sandboxes)
    verify = method(Snapshot.verify)
    set_pool = method(Snapshot.set_pool)
    compact = method(Snapshot.compact, _snapshot)


class AsyncImages:
    """The daemon's images, for asyncio."""

    def __init__(self, sync: Images) -> None:
        #: The sync images it drives.
        self.sync = sync

    list = method(Images.list)
    create = method(Images.create)
    capture_boot_snapshot = method(Images.capture_boot_snapshot)
    remove = method(Images.remove)


class AsyncPacks:
    """Snapshot packs, for asyncio."""

    def __init__(self, sync: Packs) -> None:
        #: The sync packs it drives.
        self.sync = sync

    pack = method(Packs.pack)
    unpack = method(Packs.unpack)
    push = method(Packs.push)
    pull = method(Packs.pull)


class AsyncBuilds:
    """Builds from a Dockerfile, for asyncio."""

    def __init__(self, sync: Builds) -> None:
        #: The sync builds it drives.
        self.sync = sync

    build = method(Builds.build)
    prune = method(Builds.prune)


class AsyncForkd:
    """A client of one forkd daemon, for asyncio (see ``Forkd``)."""

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> None:
        #: The sync client it drives.
        self.sync = Forkd(url, token, request_timeout)
        #: The daemon's images.
        self.images = AsyncImages(self.sync.images)
        #: Snapshot packs.
        self.packs = AsyncPacks(self.sync.packs)
        #: Builds from a Dockerfile.
        self.builds = AsyncBuilds(self.sync.builds)

    @property
    def url(self) -> str:
        """The address in use."""
        return self.sync.url

    health = method(Forkd.health)
    version = method(Forkd.version)
    lineage = method(Forkd.lineage)
