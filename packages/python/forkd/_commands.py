"""``sandbox.commands``: run a command and get its result, or stream its output as it is
produced. Without output callbacks ``run`` uses the buffered exec (one JSON answer); with
them, and in the background, the streaming exec (NDJSON events over one POST, as the TS
SDK does), whose stdin can stay open (one POST per chunk) and which can be killed by its
exec id."""

from __future__ import annotations

import base64
import codecs
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union, overload

from ._catalog import BadRequestError, InternalError
from ._error import ForkdError
from ._transport import Request, Response, Transport, compact, quote_segment
from ._types import CommandResult, from_wire
from .errors import error_from_response

#: A command line: a string runs as ``sh -c STRING``, a sequence runs as is.
Cmd = Union[str, Sequence[str]]
#: A callback that gets output as UTF-8 text.
OnText = Callable[[str], Any]
#: A callback that gets the stream's name (``stdout``/``stderr``) and raw output bytes.
OnOutput = Callable[[str, bytes], Any]
#: Signals a command can be sent (the contract's ``KillExec``).
Signal = Literal[
    "SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT"
]

#: ``run``'s keyword arguments that take output as it comes.
OUTPUT_CALLBACKS = ("on_stdout", "on_stderr", "on_output")
#: The daemon's limit on one stdin request's body.
STDIN_CHUNK_BYTES = 1024 * 1024


def _to_bytes(data: Union[str, bytes, bytearray, memoryview]) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


@dataclass(frozen=True)
class ExecSpec:
    """What to run and how: ``run``'s arguments but the callbacks and ``background``."""

    cmd: Cmd
    envs: Optional[Dict[str, str]] = None
    cwd: Optional[str] = None
    user: Optional[str] = None
    #: Seconds; the daemon counts whole milliseconds (rounded up).
    timeout: Optional[float] = None
    stdin: Optional[Union[str, bytes]] = None
    keep_stdin_open: bool = False

    def body(self, stream: bool) -> Dict[str, Any]:
        """The ``ExecRequest``. Input for a stdin kept open is sent after the start."""
        given_stdin = None if self.keep_stdin_open or self.stdin is None else self.stdin
        return compact(
            argv=["sh", "-c", self.cmd] if isinstance(self.cmd, str) else list(self.cmd),
            env=self.envs,
            cwd=self.cwd,
            user=self.user,
            timeout_ms=None if self.timeout is None else math.ceil(self.timeout * 1000),
            stdin=None if given_stdin is None else base64.b64encode(_to_bytes(given_stdin)).decode(),
            stream=stream or None,
            keep_stdin_open=self.keep_stdin_open or None,
        )


def result_of(wire: Any, stdout: bytes, stderr: bytes) -> CommandResult:
    """A ``CommandResult`` from an exit (or ExecResult) object and the output bytes."""
    text = {"stdout": stdout.decode(errors="replace"), "stderr": stderr.decode(errors="replace")}
    return from_wire(CommandResult, {**wire, **text})


class Output:
    """Output as it streams: callbacks fed, UTF-8 decoded across chunk borders (a
    character is never split), bytes kept for the result unless ``on_output`` has them."""

    def __init__(
        self,
        on_stdout: Optional[OnText],
        on_stderr: Optional[OnText],
        on_output: Optional[OnOutput],
    ) -> None:
        self._text = {"stdout": on_stdout, "stderr": on_stderr}
        self._on_output = on_output
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in self._text}
        self._kept: Dict[str, List[bytes]] = {"stdout": [], "stderr": []}

    @property
    def streaming(self) -> bool:
        """Whether anyone takes output as it comes (the streaming exec is needed)."""
        return any(self._text.values()) or self._on_output is not None

    def push(self, stream: str, data: bytes) -> None:
        if self._on_output is not None:
            self._on_output(stream, data)
        else:
            self._kept[stream].append(data)
        callback = self._text[stream]
        if callback is not None:
            text = self._decoders[stream].decode(data)
            if text:
                callback(text)

    def finish(self, exit_event: Any) -> CommandResult:
        """Flush what the decoders still hold (an incomplete last character); the result."""
        for stream, callback in self._text.items():
            rest = self._decoders[stream].decode(b"", final=True) if callback else ""
            if callback is not None and rest:
                callback(rest)
        return result_of(exit_event, b"".join(self._kept["stdout"]), b"".join(self._kept["stderr"]))


def _event_error(event: Any) -> ForkdError:
    return error_from_response(500, event)


class CommandHandle:
    """A running command: write to its stdin, signal it, wait for its result.

    ``background=True`` pumps its output to the callbacks from a thread of
    its own as it is produced, whether or not anyone calls ``wait``::

        cat = sbx.commands.run("cat", background=True, keep_stdin_open=True)
        cat.send_stdin("hello\\n")
        cat.close_stdin()
        print(cat.wait().stdout)
    """

    def __init__(
        self,
        transport: Transport,
        base: str,
        started: Any,
        response: Response,
        output: Output,
    ) -> None:
        self._transport = transport
        #: The exec id the daemon gave this command (its ``/execs/:exec_id`` routes).
        self.exec_id: str = started["exec_id"]
        #: The command's pid inside the guest.
        self.pid: int = started["pid"]
        self._path = f"{base}/execs/{quote_segment(self.exec_id)}"
        self._response = response
        self._output = output
        self._stdin_lock = threading.Lock()
        self._pump_lock = threading.Lock()
        self._done = False
        self._disconnected = False
        self._result: Optional[CommandResult] = None
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None

    def wait(self) -> CommandResult:
        """The result, once the command exited (a non-zero exit is not an exception)."""
        if self._thread is not None:
            self._thread.join()
        else:
            self._pump()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def kill(self, signal: Signal = "SIGKILL") -> None:
        """Send the command a signal (default SIGKILL); ``wait()`` then returns with it.
        ExecNotFoundError once it has exited."""
        self._transport.bytes(Request("POST", f"{self._path}/kill", json={"signal": signal}))

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Write to its stdin (it needs ``keep_stdin_open=True``), in order, even from many
        threads; large data goes in pieces the daemon takes (1 MiB each)."""
        raw = _to_bytes(data)
        with self._stdin_lock:
            for at in range(0, len(raw), STDIN_CHUNK_BYTES):
                self._post_stdin(raw[at : at + STDIN_CHUNK_BYTES], eof=False)

    def close_stdin(self) -> None:
        """Close its stdin: the command reads end of file."""
        with self._stdin_lock:
            self._post_stdin(b"", eof=True)

    def disconnect(self) -> None:
        """Stop reading its output: the daemon then kills the command (nobody could read
        its output any more) and ``wait()`` raises ConnectionAbortedError."""
        self._disconnected = True
        self._response.close()

    def _post_stdin(self, chunk: bytes, eof: bool) -> None:
        query = {"eof": True} if eof else None
        self._transport.bytes(Request("POST", f"{self._path}/stdin", query=query, body=chunk))

    def in_background(self) -> CommandHandle:
        """Pump the output from a thread of its own (daemon: it never keeps Python alive)."""
        self._thread = threading.Thread(
            target=self._pump, name=f"forkd-{self.exec_id}", daemon=True
        )
        self._thread.start()
        return self

    def _pump(self) -> None:
        """Feed the events after ``started`` to the output until the stream ends, once."""
        with self._pump_lock:
            if self._done:
                return
            try:
                self._result = self._events_to_result()
            except BaseException as e:
                # Whatever a read cut by disconnect() raised, the disconnect is why.
                self._error = self._aborted() if self._disconnected else e
                # A callback that failed, or an interrupt: stop the command too.
                self._response.close()
                if not isinstance(e, Exception):
                    raise
            finally:
                self._done = True

    def _events_to_result(self) -> CommandResult:
        result: Optional[CommandResult] = None
        for event in self._response.lines():
            kind = event.get("type")
            if kind in ("stdout", "stderr"):
                self._output.push(kind, base64.b64decode(event["data"]))
            elif kind == "exit":
                result = self._output.finish(event)
            elif kind == "error":
                raise _event_error(event)
        if result is None and self._disconnected:
            raise self._aborted()
        if result is None:
            raise InternalError("the exec stream ended before the command exited; try again")
        return result

    def _aborted(self) -> ConnectionAbortedError:
        return ConnectionAbortedError(
            f"the output of exec {self.exec_id} was disconnected; the daemon kills the command"
        )


class Commands:
    """The commands of one sandbox (``sandbox.commands``)."""

    def __init__(self, transport: Transport, base: str) -> None:
        self._transport = transport
        self._base = base

    @overload
    def run(
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
    def run(
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
    ) -> CommandHandle: ...

    def run(
        self, cmd: Cmd, *, background: bool = False, **options: Any
    ) -> Union[CommandResult, CommandHandle]:
        """Run a command: a string runs as ``sh -c STRING``, a list runs as is.

        Returns its ``CommandResult`` once it exited (a non-zero exit is not an exception:
        look at ``exit_code``); with ``background=True`` a ``CommandHandle`` at once.
        ``on_stdout``/``on_stderr`` get text as it is produced, ``on_output(stream, bytes)``
        raw chunks (the result's stdout/stderr then stay empty). ``timeout`` (seconds) kills
        it; the result then has ``timed_out=True``. ``stdin`` is given, then end of file;
        ``keep_stdin_open`` (background only) leaves it open for ``handle.send_stdin``::

            r = sbx.commands.run("ls -l /", cwd="/", envs={"LC_ALL": "C"}, timeout=10)
            sbx.commands.run("for i in 1 2 3; do echo $i; sleep 1; done", on_stdout=print)
        """
        spec, output = spec_and_output(cmd, options)
        if background:
            return self.open(spec, output).in_background()
        check_foreground(spec)
        if output.streaming:
            return self.open(spec, output).wait()
        return self.buffered(spec)

    def buffered(self, spec: ExecSpec) -> CommandResult:
        """The buffered exec: one request, the whole result. For the SDK's own modules."""
        request = Request("POST", f"{self._base}/exec", json=spec.body(stream=False))
        wire = self._transport.json(self._waiting(request, spec))
        return result_of(wire, base64.b64decode(wire["stdout"]), base64.b64decode(wire["stderr"]))

    def open(self, spec: ExecSpec, output: Output) -> CommandHandle:
        """Start a streaming exec; its handle once ``started`` arrived. Nothing reads the rest
        yet: the caller pumps it (``wait`` inline, ``in_background``, or the async SDK's
        worker). For the SDK's own modules."""
        request = Request("POST", f"{self._base}/exec", json=spec.body(stream=True))
        response = self._transport.send(self._waiting(request, spec))
        handle = CommandHandle(self._transport, self._base, _started(response), response, output)
        if spec.keep_stdin_open and spec.stdin is not None:
            handle.send_stdin(spec.stdin)
        return handle

    def _waiting(self, request: Request, spec: ExecSpec) -> Request:
        """How long a read of a command's answer may wait: its own timeout plus the
        request_timeout, or as long as it runs when it has none."""
        if spec.timeout is not None:
            request.timeout = spec.timeout + self._transport.config.request_timeout
        else:
            request.timeout = None
        return request


def spec_and_output(
    cmd: Cmd, options: Dict[str, Any], adapt: Callable[[Any], Any] = lambda c: c
) -> Tuple[ExecSpec, Output]:
    """``run``'s keyword arguments, split: the callbacks (``adapt``-ed: the async SDK moves
    them to its loop) make the Output, the rest the ExecSpec (an unknown one is a
    TypeError, as for any call)."""
    callbacks = {name: adapt(options.pop(name, None)) for name in OUTPUT_CALLBACKS}
    return ExecSpec(cmd, **options), Output(**callbacks)


def check_foreground(spec: ExecSpec) -> None:
    """A command waited for in the foreground cannot keep its stdin open: nothing could
    write to it, so it would wait forever."""
    if spec.keep_stdin_open:
        raise BadRequestError(
            "keep_stdin_open needs background=True: nothing could write to its stdin",
            {"field": "keep_stdin_open"},
        )


def _started(response: Response) -> Any:
    """The stream's first event, which must be ``started``."""
    first = next(response.lines(), None)
    if isinstance(first, dict) and first.get("type") == "started":
        return first
    response.close()
    if isinstance(first, dict) and first.get("type") == "error":
        raise _event_error(first)
    got = f'a "{first.get("type")}" event' if isinstance(first, dict) else "nothing"
    raise InternalError(f'the exec stream began with {got}, not "started"')
