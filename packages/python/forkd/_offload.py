"""How the asyncio SDK runs the sync core: each blocking call on a thread of its own (so no
connection or lock is ever bound to an event loop, and a call that waits for a long command
never starves the others, as a small shared pool could), its callbacks back on the caller's
loop, awaited when they are coroutine functions.

``static``, ``method`` and ``dual`` make an async twin of a sync-core call as a descriptor
(``kill = dual(Sandbox.kill)``), typed with ParamSpec so it takes exactly the sync call's
arguments; ``_async.py`` is the classes built from them."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Coroutine,
    Dict,
    Generic,
    Optional,
    TypeVar,
    overload,
)

if TYPE_CHECKING:
    # Only the type checker needs these (typing has them from 3.10; mypy ships the stubs).
    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")
else:
    P = TypeVar("P")

R = TypeVar("R")
T = TypeVar("T")
Call = Coroutine[Any, Any, R]


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.done():  # the awaiting task was cancelled meanwhile
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


async def offload(work: Callable[[], R], on_cancel: Optional[Callable[[], None]] = None) -> R:
    """Run a blocking call of the sync core on a thread of its own and await its outcome.
    Cancelling the awaiting task calls ``on_cancel`` (a stream is dropped, so the daemon
    stops its command); the call itself cannot be interrupted."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[R] = loop.create_future()
    context = contextvars.copy_context()

    def run() -> None:
        outcome: Any
        try:
            outcome, failed = context.run(work), False
        except BaseException as e:  # handed to the awaiting task, which re-raises it
            outcome, failed = e, True
        try:
            loop.call_soon_threadsafe(_settle, future, outcome, failed)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, name="forkd-async", daemon=True).start()
    try:
        return await future
    except asyncio.CancelledError:
        if on_cancel is not None:
            on_cancel()
        raise


def on_loop(
    loop: asyncio.AbstractEventLoop, callback: Optional[Callable[..., Any]]
) -> Optional[Callable[..., None]]:
    """A callback for the sync core that runs ``callback`` on ``loop`` (awaiting it when it
    is a coroutine function) and returns once it is done, so output keeps its order and is
    held back while the callback works."""
    if callback is None:
        return None
    target = callback

    async def call(args: Any) -> None:
        result = target(*args)
        if inspect.isawaitable(result):
            await result

    def from_worker(*args: Any) -> None:
        asyncio.run_coroutine_threadsafe(call(args), loop).result()

    return from_worker


def _callbacks_on_loop(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Keyword arguments with every ``on_…`` callback moved to the running loop."""
    loop = asyncio.get_running_loop()
    return {
        k: on_loop(loop, v) if k.startswith("on_") and callable(v) else v
        for k, v in kwargs.items()
    }


def _same(value: T) -> T:
    return value


class _Offloaded(Generic[P, R]):
    """A sync-core function awaited on a worker thread; ``wrap`` turns its result into the
    async SDK's own (a Sandbox into an AsyncSandbox, …)."""

    def __init__(self, fn: Callable[..., Any], wrap: Callable[[Any], R]) -> None:
        self._fn = fn
        self._wrap = wrap
        self.__doc__ = fn.__doc__  # for help() on the class

    def _caller(self, *bound: Any) -> Callable[P, Call[R]]:
        fn, wrap = self._fn, self._wrap

        @functools.wraps(fn)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            given = _callbacks_on_loop(kwargs)
            return wrap(await offload(lambda: fn(*bound, *args, **given)))

        return call


class _Static(_Offloaded[P, R]):
    """A class-level call (``AsyncSandbox.create``), the same on the class and instances."""

    def __get__(self, obj: Any, owner: Any) -> Callable[P, Call[R]]:
        return self._caller()


class _Method(_Offloaded[P, R]):
    """An instance call, run on the instance's sync twin (``obj.sync``)."""

    @overload
    def __get__(self, obj: None, owner: Any) -> _Method[P, R]: ...

    @overload
    def __get__(self, obj: object, owner: Any) -> Callable[P, Call[R]]: ...

    def __get__(self, obj: Any, owner: Any) -> Any:
        return self if obj is None else self._caller(obj.sync)


class _Dual(_Offloaded[P, R]):
    """A call that works on the class with an id or tag (``AsyncSandbox.kill(id)``) and on
    an instance (``await sbx.kill()``), like its sync twin."""

    @overload
    def __get__(self, obj: None, owner: Any) -> Callable[Concatenate[str, P], Call[R]]: ...

    @overload
    def __get__(self, obj: object, owner: Any) -> Callable[P, Call[R]]: ...

    def __get__(self, obj: Any, owner: Any) -> Callable[..., Call[R]]:
        return self._caller() if obj is None else self._caller(obj.sync)


@overload
def static(fn: Callable[P, R]) -> _Static[P, R]: ...
@overload
def static(fn: Callable[P, T], wrap: Callable[[T], R]) -> _Static[P, R]: ...
def static(fn: Callable[..., Any], wrap: Callable[[Any], Any] = _same) -> _Static[Any, Any]:
    """An async twin of a class-level call."""
    return _Static(fn, wrap)


@overload
def method(fn: Callable[Concatenate[Any, P], R]) -> _Method[P, R]: ...
@overload
def method(fn: Callable[Concatenate[Any, P], T], wrap: Callable[[T], R]) -> _Method[P, R]: ...
def method(fn: Callable[..., Any], wrap: Callable[[Any], Any] = _same) -> _Method[Any, Any]:
    """An async twin of an instance call."""
    return _Method(fn, wrap)


@overload
def dual(fn: Callable[Concatenate[Any, P], R]) -> _Dual[P, R]: ...
@overload
def dual(fn: Callable[Concatenate[Any, P], T], wrap: Callable[[T], R]) -> _Dual[P, R]: ...
def dual(fn: Callable[..., Any], wrap: Callable[[Any], Any] = _same) -> _Dual[Any, Any]:
    """An async twin of a call that works by id on the class and on an instance."""
    return _Dual(fn, wrap)

