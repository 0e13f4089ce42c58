"""The SDK's data types: frozen dataclasses mirroring the REST contract's objects
(docs/openapi.json). Python names are the wire names (both snake_case), so one converter
serves them all; tests/test_wire.py checks every field against the contract's schemas.
Unknown wire fields are dropped (clients ignore them); fields an older daemon does not send
take their defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")


def nested(cls: type, many: bool = False) -> Dict[str, Any]:
    """Field metadata: the field holds a wire object (or a list of them) of ``cls``."""
    return {"wire": cls, "many": many}


def from_wire(cls: Type[T], wire: Any) -> T:
    """A wire object → ``cls``, nested objects converted by their field's metadata."""
    source = wire if isinstance(wire, dict) else {}
    values: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in source:
            continue
        value, inner = source[f.name], f.metadata.get("wire")
        if inner is not None and value is not None:
            many = f.metadata.get("many")
            value = [from_wire(inner, v) for v in value] if many else from_wire(inner, value)
        values[f.name] = value
    return cls(**values)


@dataclass(frozen=True)
class SandboxInfo:
    """What the daemon knows about a sandbox (wire object ``Sandbox``).

    ``state``: ``starting`` → ``running`` → ``stopped`` (killed by request or timeout), or
    ``dead`` (its VM died; ``reason`` says why). Times are ISO 8601 strings."""

    id: str
    state: str
    image: Optional[str]
    snapshot: Optional[str]
    parent: Optional[str]
    memory_mib: int
    cpus: int
    labels: Dict[str, str]
    created_at: str
    expires_at: Optional[str]
    pid: Optional[int]
    reason: Optional[str] = None
    #: While it runs: ``{"mode", "egress"}`` (docs/network.md), as the wire has it.
    network: Optional[Dict[str, Any]] = None
    #: Its QEMU's ``{"memory_bytes", "cpu", "pids", "cgroup"}`` (docs/limits.md).
    limits: Optional[Dict[str, Any]] = None
    #: What a running sandbox uses (``get`` of one sandbox only).
    usage: Optional[Dict[str, Any]] = None
    #: How its QEMU is confined: ``{"uid", "seccomp", "sandbox", "spawn", "capabilities",
    #: "namespaces"}`` (``get`` of one running sandbox; docs/security.md).
    confinement: Optional[Dict[str, Any]] = None
    #: While it runs, what it asks that the host does not enforce (``network``, ``names``,
    #: ``limits``, ``confinement``; a daemon started with ``--accept-unenforced``).
    unenforced: Optional[List[str]] = None
    #: How awake it is: ``running``, ``paused``, ``hibernated`` or ``halted`` (docs/idle.md).
    tier: Optional[str] = None
    #: While it runs, when it pauses itself: ``{"pause_after_s", "hibernate_after_s",
    #: "source"}`` (None: never; ``source`` ``sandbox`` or ``daemon``; docs/idle.md).
    idle: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class CommandResult:
    """How a command ended, and what it printed (wire object ``ExecResult``, decoded).

    A non-zero exit is not an exception: look at ``exit_code`` (None when a signal ended
    it: see ``signal``); ``timed_out`` is True when its ``timeout`` ran out."""

    exit_code: Optional[int]
    signal: Optional[str]
    timed_out: bool
    duration_ms: float
    stdout: str
    stderr: str


@dataclass(frozen=True)
class EntryInfo:
    """A file or directory inside a sandbox (wire object ``FileStat``): ``kind`` is
    ``file``, ``dir``, ``symlink`` or ``other``; ``mode`` the permission bits; ``target``
    a symlink's target as written; ``xattrs`` its ``user.*`` extended attributes, if any."""

    name: str
    kind: str
    size: int
    mode: int
    mtime_ms: float
    owner: Optional[str] = None
    group: Optional[str] = None
    target: Optional[str] = None
    xattrs: Optional[Dict[str, str]] = None


@dataclass(frozen=True)
class WriteInfo:
    """What ``files.write`` stored: the path and the bytes written."""

    path: str
    size: int


@dataclass(frozen=True)
class ImageInfo:
    """An image on the daemon's host (wire object ``Image``)."""

    name: str
    format: str
    size_bytes: int
    disk_bytes: int
    created_at: str
    source: Dict[str, Any]
    #: An OCI image's config (env, working_dir, user, entrypoint, cmd) as the wire has it.
    config: Optional[Dict[str, Any]] = None
    #: Its boot snapshots (docs/snapshots.md "Boot snapshots"), as the wire has them.
    boot_snapshots: Optional[List[Dict[str, Any]]] = None
    #: What a build did not do without failing (a boot snapshot it could not capture).
    warnings: Optional[List[str]] = None
    #: A cache entry (a container image's root, made by the containerd shim): removed
    #: once unused for the daemon's image cache time.
    cache: Optional[bool] = None


@dataclass(frozen=True)
class PackInfo:
    """What ``packs.pack`` wrote (wire object ``PackResult``)."""

    tag: str
    file: str
    #: Size of the pack file.
    bytes: int
    #: Snapshots in the pack, root first.
    chain: List[str]
    image: Optional[str]
    files: int
    #: The files packed, holes included.
    logical_bytes: int


@dataclass(frozen=True)
class InstallInfo:
    """What ``packs.unpack`` or ``packs.pull`` installed (wire object ``UnpackResult``)."""

    tag: str
    #: Snapshots written, root first.
    installed: List[str]
    #: Snapshots of the chain this host had already.
    reused: List[str]
    image: Optional[str]
    bytes_downloaded: int
    #: Bytes an interrupted pull had fetched already (resumed, not fetched again).
    bytes_resumed: int


@dataclass(frozen=True)
class PushInfo:
    """What ``packs.push`` sent (wire object ``PushResult``)."""

    #: ``REGISTRY/REPO:TAG@DIGEST``.
    reference: str
    digest: str
    blobs: int
    uploaded: int
    #: Blobs the repository had already.
    skipped: int
    #: Blobs cross-mounted from another repository of the registry.
    mounted: int
    bytes_uploaded: int


@dataclass(frozen=True)
class SnapshotFileInfo:
    """One file of a snapshot: logical ``size``, bytes ``allocated`` on disk, checksum."""

    name: str
    size: int
    allocated: int
    sha256: str


@dataclass(frozen=True)
class PoolBudgetInfo:
    """The host-wide pool budget (wire object ``PoolBudgetState``): all snapshots' pool VMs
    together stay within ``vms`` and ``memory_bytes``, the least recently forked snapshots'
    pools giving way first; ``used_vms`` and ``used_memory_bytes`` are what they take now."""

    vms: int
    memory_bytes: int
    used_vms: int
    used_memory_bytes: int


@dataclass(frozen=True)
class PoolInfo:
    """A snapshot's pool of pre-started VMMs: the size asked for, how many wait ready,
    whether they are pre-warmed (restored, run once and paused), and the host memory the
    waiting VMs take together (``None``: not measured, or an older daemon). They are QEMUs but
    not sandboxes: ``Sandbox.list()`` does not return them. ``held``: VMs of the size the
    host's pool budget holds back (other snapshots were forked more recently; forks of this
    one take the cold path meanwhile); ``budget``: that budget (``None`` from an older daemon)."""

    size: int
    ready: int
    prewarm: bool = False
    memory_bytes: Optional[int] = None
    held: int = 0
    budget: Optional[PoolBudgetInfo] = field(default=None, metadata=nested(PoolBudgetInfo))


@dataclass(frozen=True)
class SnapshotMemoryInfo:
    """How a snapshot's memory is stored (wire object ``SnapshotMemory``): ``full``, or a
    ``diff`` over ``parent``'s memory (only the pages that changed), materialized into a full
    file for forks and cached (``materialized_bytes``, 0 when not)."""

    kind: str
    parent: Optional[str]
    logical_bytes: int
    stored_bytes: int
    materialized_bytes: int
    depth: int


@dataclass(frozen=True)
class SnapshotInfo:
    """What the daemon knows about a snapshot (wire object ``Snapshot``).

    ``state`` is ``writing`` while it is made, then ``ready`` or ``failed``; ``bootable`` is
    False when a file is missing or changed size (``reason`` names it). Its chain: ``depth``
    (0: standalone), ``ancestors`` (parent first), ``dependents`` (snapshots built on it)."""

    tag: str
    state: str
    bootable: bool
    image: Optional[str]
    parent: Optional[str]
    source_sandbox: Optional[str]
    memory_mib: int
    cpus: int
    labels: Dict[str, str]
    created_at: str
    kernel: str
    qemu: str
    logical_bytes: int
    physical_bytes: int
    children_alive: int
    pool: PoolInfo = field(metadata=nested(PoolInfo))
    files: List[SnapshotFileInfo] = field(
        default_factory=list, metadata=nested(SnapshotFileInfo, many=True)
    )
    reason: Optional[str] = None
    # A daemon older than chains sends none of these: every snapshot is standalone there.
    depth: int = 0
    ancestors: List[str] = field(default_factory=list)
    dependents: List[str] = field(default_factory=list)
    # A daemon older than diff memory sends none (nor does an unpublished snapshot).
    memory: Optional[SnapshotMemoryInfo] = field(
        default=None, metadata=nested(SnapshotMemoryInfo)
    )
    #: Where it came from when it was unpacked or pulled: ``{"kind": "pack" | "registry" |
    #: "url", "from", "digest", "at"}`` (docs/packs.md); absent for one made here.
    origin: Optional[Dict[str, Any]] = None
    #: On a boot snapshot: what it is valid for (image, kernel, QEMU, RAM, vCPUs, NIC).
    boot: Optional[Dict[str, Any]] = None
    #: The user its forks' commands and files default to.
    user: Optional[str] = None
    #: Where its forks' commands start by default.
    workdir: Optional[str] = None


@dataclass(frozen=True)
class LineageEdge:
    """The edge from a lineage node to what it came from."""

    kind: str
    id: str


@dataclass(frozen=True)
class LineageNode:
    """One image, snapshot or live sandbox of the lineage (``kind``), with the edge to what
    it came from (a snapshot's parent snapshot or image, a sandbox's snapshot or image;
    None for an image). Build the tree from the ``parent`` edges."""

    kind: str
    id: str
    parent: Optional[LineageEdge] = field(metadata=nested(LineageEdge))
    state: str
    created_at: str


@dataclass(frozen=True)
class VerifyProblem:
    """One file of a snapshot that did not match its manifest."""

    file: str
    problem: str


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of re-checking a snapshot's files (wire object ``VerifyResult``)."""

    ok: bool
    problems: List[VerifyProblem] = field(
        default_factory=list, metadata=nested(VerifyProblem, many=True)
    )


@dataclass(frozen=True)
class VersionInfo:
    """The daemon's version, API version, QEMU version and accelerator (``kvm``/``tcg``)."""

    version: str
    api: str
    qemu: str
    accel: str
