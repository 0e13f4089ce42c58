"""The asyncio SDK end to end (real daemon, real VMs): five sandboxes driven at once under
``asyncio.gather``, each streaming output while its command runs (coroutine callbacks on
the loop), a 10 MB binary round trip, a background command's stdin; the branch + fork(3)
scenario with its state checks; errors of each main kind as their classes; pause and
resume, the idle policy of forks and ``set_idle``; ``async with``
killing at the end; and a cancelled streaming command killed in the guest."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import threading
import time
import unittest
from typing import Any, Awaitable, Callable, List, Tuple, TypeVar

import support
from support import ask_keeper

import forkd
from forkd import AsyncForkd, AsyncSandbox, AsyncSnapshot

DAEMON: support.DaemonProcess
TAG = "py-async"
T = TypeVar("T")
#: Made once, off the event loop (10 MB of randomness and its hash would stall it).
DATA = os.urandom(10 * 1024 * 1024)
DIGEST = hashlib.sha256(DATA).hexdigest()


def setUpModule() -> None:
    global DAEMON
    DAEMON = support.start_module_daemon()
    asyncio.run(AsyncSnapshot.create(TAG, image="busybox", url=DAEMON.url))


async def until_capacity(make: Callable[[], Awaitable[T]]) -> T:
    """``make`` until the daemon has room for another boot (503 capacity, Retry-After)."""
    while True:
        try:
            return await make()
        except forkd.CapacityError as e:
            await asyncio.sleep(e.retry_after or 1.0)


async def fork_one() -> AsyncSandbox:
    return await until_capacity(lambda: AsyncSandbox.create(snapshot=TAG, url=DAEMON.url))


async def ask(sbx: AsyncSandbox, words: str) -> str:
    return (await sbx.commands.run(ask_keeper(words))).stdout


class AsyncSandboxTest(unittest.IsolatedAsyncioTestCase):
    async def exercise(self, sbx: AsyncSandbox, n: int) -> str:
        """What each of the gathered sandboxes does; returns its id."""
        loop_thread = threading.get_ident()
        arrivals: List[Tuple[float, str]] = []
        start = time.monotonic()

        async def on_stdout(text: str) -> None:
            self.assertEqual(threading.get_ident(), loop_thread, "callbacks run on the loop")
            arrivals.append((time.monotonic() - start, text))

        result = await sbx.commands.run(
            f"for i in 1 2 3 4 5; do echo {n}-$i; sleep 0.2; done", on_stdout=on_stdout
        )
        ended = time.monotonic() - start
        expected = "".join(f"{n}-{i}\n" for i in range(1, 6))
        self.assertEqual(("".join(t for _, t in arrivals), result.stdout), (expected, expected))
        self.assertLess(arrivals[0][0], ended - 0.4, "the first line arrived only at the end")

        self.assertEqual((await sbx.files.write("/tmp/blob", DATA)).size, len(DATA))
        self.assertTrue(await sbx.files.read("/tmp/blob", format="bytes") == DATA, "10 MB differ")
        streamed: List[bytes] = []
        async with await sbx.files.read("/tmp/blob", format="stream") as chunks:
            async for chunk in chunks:
                streamed.append(chunk)
        self.assertEqual(sum(map(len, streamed)), len(DATA))
        in_guest = await sbx.commands.run(["sha256sum", "/tmp/blob"])
        self.assertEqual(in_guest.stdout.split(" ")[0], DIGEST)

        cat = await sbx.commands.run("cat", background=True, keep_stdin_open=True)
        await cat.send_stdin(f"hello {n}")
        await cat.close_stdin()
        self.assertEqual((await cat.wait()).stdout, f"hello {n}")
        self.assertTrue(await sbx.files.exists("/tmp/blob"))
        return sbx.id

    async def test_five_sandboxes_under_gather(self) -> None:
        sandboxes = await asyncio.gather(*(fork_one() for _ in range(5)))

        async def one(sbx: AsyncSandbox, n: int) -> str:
            async with sbx:
                return await self.exercise(sbx, n)

        ids = await asyncio.gather(*(one(s, n) for n, s in enumerate(sandboxes)))
        self.assertEqual(len(set(ids)), 5)
        states = await asyncio.gather(*(s.refresh() for s in sandboxes))
        self.assertEqual({s.state for s in states}, {"stopped"}, "async with killed them")

    async def test_branch_then_fork_3_children_that_diverge(self) -> None:
        token = secrets.token_hex(8)
        async with await fork_one() as source:
            await source.files.write("/root/note.txt", "before the branch")
            await source.commands.run(support.START_KEEPER)
            self.assertEqual(await ask(source, f"set {token}"), f"{token}\n")
            result = await source.branch(tag="py-async-branch", fork=3)
            self.addAsyncCleanup(AsyncSnapshot.remove, "py-async-branch", force=True, cascade=True, url=DAEMON.url)
            self.assertIsInstance(result.snapshot, AsyncSnapshot)
            children = result.children.sandboxes if result.children else []
            self.assertEqual(len(children), 3, result.children)

            async def check(child: AsyncSandbox, i: int) -> None:
                async with child:
                    self.assertEqual(await child.files.read("/root/note.txt"), "before the branch")
                    self.assertEqual(await ask(child, "get"), f"{token}\n")
                    await child.files.write("/root/note.txt", f"child {i}")
                    self.assertEqual(await ask(child, f"set child-{i}"), f"child-{i}\n")
                    await asyncio.sleep(0.3)  # the others diverge meanwhile
                    self.assertEqual(await child.files.read("/root/note.txt"), f"child {i}")
                    self.assertEqual(await ask(child, "get"), f"child-{i}\n")

            await asyncio.gather(*(check(c, i) for i, c in enumerate(children)))
            self.assertEqual(await ask(source, "get"), f"{token}\n", "the source ran on, unchanged")
            nodes = await AsyncForkd(DAEMON.url).lineage(tag="py-async-branch")
            self.assertEqual(nodes[0].id, "py-async-branch")

    async def test_errors_of_each_kind(self) -> None:
        url = DAEMON.url
        with self.assertRaises(forkd.SandboxNotFoundError):
            await AsyncSandbox.connect("sbx-000000000000", url=url)
        with self.assertRaises(forkd.SandboxNotFoundError):
            await AsyncSandbox.kill("sbx-000000000000", url=url)
        with self.assertRaises(forkd.BadRequestError) as bad:
            await AsyncSandbox.create(memory_mib=1, url=url)
        self.assertEqual(bad.exception.details, {"field": "body.memory_mib", "reason": "must be >= 64"})
        with self.assertRaises(forkd.NameTakenError):
            await AsyncSnapshot.create(TAG, url=url)
        with self.assertRaises(forkd.DaemonUnreachableError):
            await AsyncSandbox.list(url=f"unix:{DAEMON.home.dir}/none.sock")
        sbx = await fork_one()
        async with sbx:
            with self.assertRaises(forkd.CommandNotFoundError):
                await sbx.commands.run(["no-such-command"], on_stdout=lambda s: None)
            with self.assertRaises(forkd.GuestFileNotFoundError):
                await sbx.files.read("/no/such/file")
        with self.assertRaises(forkd.SandboxNotRunningError):
            await sbx.commands.run("true")

    async def test_cancelling_a_streamed_command_kills_it(self) -> None:
        async with await fork_one() as sbx:
            seen: List[str] = []
            ticker = "while true; do echo tick; sleep 0.2; done"
            task = asyncio.ensure_future(sbx.commands.run(ticker, on_stdout=seen.append))
            while not seen:
                await asyncio.sleep(0.05)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            # The SDK drops the stream; the daemon kills the exec at its next output line.
            for _ in range(50):
                if "while true" not in (await sbx.commands.run("ps")).stdout:
                    break
                await asyncio.sleep(0.1)
            self.assertNotIn("while true", (await sbx.commands.run("ps")).stdout)

    async def test_snapshot_and_daemon_calls(self) -> None:
        snap = await AsyncSnapshot.get(TAG, url=DAEMON.url)
        self.assertEqual((snap.tag, snap.info.state), (TAG, "ready"))
        self.assertEqual((await snap.set_pool(0)).size, 0)
        workers = await until_capacity(lambda: snap.fork_all(2, idle={"hibernate_after_s": 0}))
        self.assertTrue(all(isinstance(w, AsyncSandbox) for w in workers))
        self.assertEqual(workers[0].info.idle, {"pause_after_s": None, "hibernate_after_s": None, "source": "sandbox"})
        self.assertEqual((await workers[0].pause()).tier, "paused")
        self.assertEqual(workers[0].info.tier, "paused")
        self.assertEqual((await AsyncSandbox.resume(workers[0].id, url=DAEMON.url)).tier, "running")
        changed = await workers[1].set_idle({"pause_after_s": 600})
        self.assertEqual(changed.idle, {"pause_after_s": 600, "hibernate_after_s": None, "source": "sandbox"})
        self.assertEqual(workers[1].info.idle, changed.idle)
        limited = await AsyncSandbox.set_limits(workers[1].id, {"pids": 96}, url=DAEMON.url)
        self.assertEqual((limited.limits or {}).get("pids"), 96)
        await asyncio.gather(*(w.kill() for w in workers))
        client = AsyncForkd(DAEMON.url)
        await client.health()
        version: Any = await client.version()
        self.assertEqual(version.api, "v1")
        self.assertIn("busybox", [i.name for i in await client.images.list()])


if __name__ == "__main__":
    unittest.main()
