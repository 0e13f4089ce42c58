"""Snapshots, forks, branches and lineage end to end (sync SDK, real daemon and VMs): a
snapshot made with warm-up and a background process (progress streamed), its info, pool
and checksums; fork(3) children that start warm; then the branch scenario: a sandbox
with a file and a process whose state lives only in its memory is branched with fork=3,
every child sees both, and the children and the source then diverge independently. Also
the conflicts (a taken tag, removing a snapshot others depend on) as their classes."""

from __future__ import annotations

import secrets
import unittest
from typing import List

import support
from support import ask_keeper

import forkd
from forkd import Sandbox, Snapshot

DAEMON: support.DaemonProcess
SNAP: Snapshot
PROGRESS: List[str] = []
TAG = "py-warm"
COUNTER = "i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done"


def setUpModule() -> None:
    global DAEMON, SNAP
    DAEMON = support.start_module_daemon()
    SNAP = Snapshot.create(
        TAG,
        image="busybox",
        warm=["echo warmed > /root/warm.txt"],
        start=[COUNTER],
        wait_for="test -s /tmp/count",
        labels={"suite": "python"},
        on_progress=PROGRESS.append,
        url=DAEMON.url,
    )


def count(sbx: Sandbox) -> int:
    return int(sbx.commands.run("cat /tmp/count").stdout)


def kill_all(sandboxes: List[Sandbox]) -> None:
    for sbx in sandboxes:
        sbx.__exit__(None, None, None)


class SnapshotTest(unittest.TestCase):
    def test_create_info_pool_verify(self) -> None:
        self.assertTrue(PROGRESS, "a create with on_progress streams its steps")
        info = Snapshot.get(TAG, url=DAEMON.url).info
        self.assertEqual((info.tag, info.state, info.bootable, info.image), (TAG, "ready", True, "busybox"))
        self.assertEqual((info.depth, info.parent, info.labels), (0, None, {"suite": "python"}))
        self.assertIn("memory", [f.name for f in info.files])
        self.assertIn(TAG, [s.tag for s in Snapshot.list(url=DAEMON.url)])
        pool = SNAP.set_pool(1)
        self.assertEqual((pool.size, SNAP.info.pool.size), (1, 1))
        self.assertEqual(SNAP.set_pool(0).size, 0)
        report = SNAP.verify()
        self.assertEqual((report.ok, report.problems), (True, []))

    def test_fork_3_children_start_warm(self) -> None:
        result = SNAP.fork(3, labels={"kind": "child"})
        self.addCleanup(kill_all, result.sandboxes)
        self.assertEqual((len(result.sandboxes), result.failed), (3, []))
        for child in result.sandboxes:
            self.assertEqual((child.info.snapshot, support.user_labels(child.info.labels)), (TAG, {"kind": "child"}))
            self.assertEqual(child.files.read("/root/warm.txt"), "warmed\n")
            first = count(child)
            # The process started before the capture counts on in every child.
            child.commands.run("sleep 0.5")
            self.assertGreater(count(child), first)
        self.assertEqual(len({c.id for c in result.sandboxes}), 3)

    def test_branch_then_fork_3_children_that_diverge(self) -> None:
        source = support.until_capacity(lambda: Sandbox.create(snapshot=TAG, url=DAEMON.url))
        self.addCleanup(source.__exit__, None, None, None)
        token = secrets.token_hex(8)
        source.files.write("/root/note.txt", "before the branch")
        source.commands.run(support.START_KEEPER)
        self.assertEqual(source.commands.run(ask_keeper(f"set {token}")).stdout, f"{token}\n")

        result = source.branch(tag="py-branch", fork=3, labels={"step": "1"})
        self.addCleanup(Snapshot.remove, "py-branch", force=True, cascade=True, url=DAEMON.url)
        children = result.children.sandboxes if result.children else []
        self.addCleanup(kill_all, children)
        self.assertEqual((len(children), result.children.failed if result.children else None), (3, []))
        snap = result.snapshot.info
        self.assertEqual((snap.tag, snap.parent, snap.source_sandbox, snap.depth), ("py-branch", TAG, source.id, 1))
        self.assertIn(result.mode, ("copy", "live"))
        self.assertGreater(result.pause_ms, 0)

        for child in children:
            self.assertEqual(child.info.snapshot, "py-branch")
            self.assertEqual(child.files.read("/root/note.txt"), "before the branch")
            self.assertEqual(child.commands.run(ask_keeper("get")).stdout, f"{token}\n", "memory state")

        for i, child in enumerate(children):
            child.files.write("/root/note.txt", f"child {i}")
            child.commands.run(ask_keeper(f"set child-{i}"))
        source.commands.run(ask_keeper("set source-after"))
        for i, child in enumerate(children):
            self.assertEqual(child.files.read("/root/note.txt"), f"child {i}")
            self.assertEqual(child.commands.run(ask_keeper("get")).stdout, f"child-{i}\n")
        self.assertEqual(source.files.read("/root/note.txt"), "before the branch", "the source ran on")
        self.assertEqual(source.commands.run(ask_keeper("get")).stdout, "source-after\n")

        nodes = forkd.Forkd(DAEMON.url).lineage(tag="py-branch")
        kids = {n.id for n in nodes if n.parent and n.parent.kind == "snapshot" and n.parent.id == "py-branch"}
        self.assertEqual(kids, {c.id for c in children})
        top = next(n for n in nodes if n.id == "py-branch")
        self.assertEqual((top.kind, top.parent), ("snapshot", forkd.LineageEdge("snapshot", TAG)))

        # Conflicts: the snapshot under a chain cannot go; nor can a tag be taken twice.
        with self.assertRaises(forkd.SnapshotInUseError) as in_use:
            Snapshot.remove(TAG, url=DAEMON.url)
        self.assertEqual(in_use.exception.status, 409)
        with self.assertRaises(forkd.NameTakenError):
            source.branch(tag="py-branch")

    def test_conflicts_and_not_found(self) -> None:
        with self.assertRaises(forkd.NameTakenError) as taken:
            Snapshot.create(TAG, image="busybox", url=DAEMON.url)
        self.assertEqual((taken.exception.code, taken.exception.status), ("name_taken", 409))
        with self.assertRaises(forkd.SnapshotNotFoundError):
            Snapshot.get("no-such-tag", url=DAEMON.url)
        with self.assertRaises(forkd.BadRequestError):
            SNAP.fork(0)
        with self.assertRaises(forkd.BadRequestError):
            Snapshot.create("Not A Tag", url=DAEMON.url)


if __name__ == "__main__":
    unittest.main()
