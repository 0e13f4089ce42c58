"""``sandbox.files``: the sandbox's filesystem. Contents travel as raw octet streams both
ways: an upload from a binary file or an iterable of chunks is sent as it is read, and a
``format="stream"`` download hands over the answer as it arrives, so neither is ever held
in memory whole."""

from __future__ import annotations

from typing import IO, Iterable, Iterator, List, Literal, Optional, Union, overload

from ._catalog import GuestFileNotFoundError
from ._transport import Request, Response, Transport
from ._types import EntryInfo, WriteInfo, from_wire

#: What ``files.write`` takes: text (UTF-8), bytes, a binary file, or chunks of bytes.
WriteData = Union[str, bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]


class FileStream:
    """A file's contents as they arrive from the sandbox: iterate it for chunks of bytes.
    A short read (the guest failed mid-file) raises. Use it as a context manager, or read it
    to its end, so its connection is released::

        with sbx.files.read("/data/big.bin", format="stream") as chunks, open("big.bin", "wb") as f:
            for chunk in chunks:
                f.write(chunk)
    """

    def __init__(self, response: Response) -> None:
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        return self._response.chunks()

    def close(self) -> None:
        """Stop reading (the rest is not downloaded)."""
        self._response.close()

    def __enter__(self) -> FileStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Files:
    """The files of one sandbox (``sandbox.files``)."""

    def __init__(self, transport: Transport, base: str) -> None:
        self._transport = transport
        self._base = base

    @overload
    def read(self, path: str, format: Literal["text"] = "text") -> str: ...

    @overload
    def read(self, path: str, format: Literal["bytes"]) -> bytes: ...

    @overload
    def read(self, path: str, format: Literal["stream"]) -> FileStream: ...

    def read(self, path: str, format: str = "text") -> Union[str, bytes, FileStream]:
        """A file's contents: ``text`` (UTF-8, the default, as in E2B's SDK), ``bytes``, or
        ``stream`` (a ``FileStream`` of chunks, for large files).
        GuestFileNotFoundError when it does not exist.

        ``blob = sbx.files.read("/tmp/blob", format="bytes")``"""
        if format not in ("text", "bytes", "stream"):
            raise ValueError(f'format is "text", "bytes" or "stream", not {format!r}')
        response = self._transport.send(self._request("GET", "", path))
        if format == "stream":
            return FileStream(response)
        data = response.read_all()
        return data.decode() if format == "text" else data

    def write(
        self,
        path: str,
        data: WriteData,
        *,
        mode: Optional[int] = None,
        parents: Optional[bool] = None,
    ) -> WriteInfo:
        """Write a file, replacing it if it exists. A binary file or an iterable of bytes is
        streamed as it is read; ``mode`` sets a new file's permission bits (``0o755``),
        ``parents=True`` creates missing directories.

        ``sbx.files.write("/app/run.sh", "#!/bin/sh\\necho hi\\n", mode=0o755, parents=True)``"""
        body = data.encode() if isinstance(data, str) else data
        request = self._request("PUT", "", path, mode=mode, parents=parents)
        request.body = body
        wire = self._transport.json(request)
        return WriteInfo(path=path, size=wire["size"])

    def list(self, path: str) -> List[EntryInfo]:
        """The entries of a directory.

        ``[e.name for e in sbx.files.list("/etc") if e.kind == "file"]``"""
        wire = self._transport.json(self._request("GET", "/list", path))
        return [from_wire(EntryInfo, e) for e in wire["entries"]]

    def stat(self, path: str) -> EntryInfo:
        """One entry's kind, size, mode and mtime; GuestFileNotFoundError when it does not
        exist."""
        return from_wire(EntryInfo, self._transport.json(self._request("GET", "/stat", path)))

    def exists(self, path: str) -> bool:
        """Whether the path exists in the sandbox."""
        try:
            self.stat(path)
        except GuestFileNotFoundError:
            return False
        return True

    def make_dir(self, path: str, *, parents: bool = True, mode: Optional[int] = None) -> None:
        """Create a directory, with its parents unless ``parents=False``."""
        body = {"path": path, "parents": parents}
        if mode is not None:
            body["mode"] = mode
        self._transport.bytes(Request("POST", f"{self._base}/files/mkdir", json=body))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, or a directory and what it holds with ``recursive=True``."""
        self._transport.bytes(self._request("DELETE", "", path, recursive=recursive or None))

    def _request(
        self,
        method: str,
        route: str,
        path: str,
        *,
        mode: Optional[int] = None,
        parents: Optional[bool] = None,
        recursive: Optional[bool] = None,
    ) -> Request:
        query = {"path": path, "mode": mode, "parents": parents, "recursive": recursive}
        return Request(method, f"{self._base}/files{route}", query=query)
