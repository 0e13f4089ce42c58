"""Portable snapshots through the Python SDK, end to end (real daemon, VMs and Debian's
``docker-registry`` on loopback): a warmed snapshot is packed to a file with progress,
removed, unpacked and forked (the child has the warm file and the running
counter); pushed to the registry, pushed again (every blob skipped), pulled under another
tag and forked; a file that is not a pack and a tag the registry lacks are refused as their
classes, with nothing installed."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request
from typing import List

import support

import forkd
from forkd import AsyncForkd, Forkd, Snapshot

DAEMON: support.DaemonProcess
REGISTRY = ""
TAG = "py-pack"
COUNTER = "i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_registry() -> str:
    """A plain registry on 127.0.0.1 (a module cleanup ends it by pid and removes its files)."""
    root = tempfile.mkdtemp(prefix="forkd-py-registry-")
    unittest.addModuleCleanup(shutil.rmtree, root, ignore_errors=True)
    host = f"127.0.0.1:{free_port()}"
    config = os.path.join(root, "config.yml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(
            "version: 0.1\nlog:\n  level: error\n"
            f"storage:\n  filesystem:\n    rootdirectory: {root}/data\n"
            f"http:\n  addr: {host}\n"
        )
    proc = subprocess.Popen(
        ["docker-registry", "serve", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    unittest.addModuleCleanup(proc.wait)
    unittest.addModuleCleanup(proc.kill)
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"http://{host}/v2/", timeout=1).close()
            return host
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("docker-registry did not start")
            time.sleep(0.1)


def setUpModule() -> None:
    global DAEMON, REGISTRY
    DAEMON = support.start_module_daemon()
    REGISTRY = start_registry()
    Snapshot.create(
        TAG,
        image="busybox",
        warm=["echo warmed > /root/warm.txt"],
        start=[COUNTER],
        wait_for="test -s /tmp/count",
        url=DAEMON.url,
    )


def assert_warm(test: unittest.TestCase, tag: str) -> None:
    """A child of ``tag`` has the warm file and the counter process running on."""
    with Snapshot.get(tag, url=DAEMON.url).fork(1).sandboxes[0] as child:
        test.assertEqual(child.commands.run("cat /root/warm.txt").stdout, "warmed\n")
        first = int(child.commands.run("cat /tmp/count").stdout)
        time.sleep(0.6)
        test.assertGreater(int(child.commands.run("cat /tmp/count").stdout), first)


class PacksTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Forkd(DAEMON.url)
        self.dir = tempfile.mkdtemp(prefix="forkd-py-pack-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def tags(self) -> List[str]:
        return [s.tag for s in Snapshot.list(url=DAEMON.url)]

    def test_pack_remove_unpack_fork(self) -> None:
        file = os.path.join(self.dir, "warm.forkd.tar.zst")
        progress: List[str] = []
        packed = self.client.packs.pack(TAG, file, on_progress=progress.append)
        self.assertTrue(progress, "a pack with on_progress streams its steps")
        self.assertEqual((packed.tag, packed.chain, packed.image), (TAG, [TAG], "busybox"))
        self.assertEqual(packed.bytes, os.path.getsize(file))
        self.assertGreater(packed.logical_bytes, packed.bytes, "the memory file stays sparse")
        Snapshot.remove(TAG, url=DAEMON.url)
        self.assertNotIn(TAG, self.tags())
        installed = asyncio.run(AsyncForkd(DAEMON.url).packs.unpack(file))
        self.assertEqual((installed.tag, installed.installed), (TAG, [TAG]))
        assert_warm(self, TAG)
        with self.assertRaises(forkd.NameTakenError):
            self.client.packs.unpack(file)
        renamed = self.client.packs.unpack(file, tag="py-unpacked")
        self.assertEqual(renamed.installed, ["py-unpacked"])
        Snapshot.remove("py-unpacked", url=DAEMON.url)

    def test_push_again_skips_then_pull_fork(self) -> None:
        ref = f"{REGISTRY}/team/py:1"
        first = self.client.packs.push(TAG, ref)
        self.assertGreater(first.uploaded, 0)
        self.assertTrue(first.reference.startswith(ref) and first.digest.startswith("sha256:"))
        again = self.client.packs.push(TAG, ref)
        # Nothing goes up again. (A chunked push counts its skipped chunks and index blobs
        # apart from `blobs`, so the two totals differ: a known mismatch, see docs/packs.md.)
        self.assertEqual(again.uploaded, 0)
        self.assertGreater(again.skipped, 0)
        pulled = self.client.packs.pull(ref, tag="py-pulled")
        self.assertEqual(pulled.installed, ["py-pulled"])
        self.assertGreater(pulled.bytes_downloaded, 0)
        assert_warm(self, "py-pulled")
        Snapshot.remove("py-pulled", url=DAEMON.url)

    def test_bad_input_is_refused_and_nothing_installed(self) -> None:
        before = self.tags()
        junk = os.path.join(self.dir, "junk.forkd.tar.zst")
        with open(junk, "wb") as f:
            f.write(b"not a pack\n" * 100)
        with self.assertRaises(forkd.PackInvalidError):
            self.client.packs.unpack(junk, tag="py-junk")
        with self.assertRaises(forkd.ForkdError) as missing:
            self.client.packs.pull(f"{REGISTRY}/team/none:1", tag="py-none")
        self.assertIn("team/none", str(missing.exception))
        self.assertEqual(self.tags(), before)


if __name__ == "__main__":
    unittest.main()
