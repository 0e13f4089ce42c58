"""The sync SDK end to end, against a real ``forkd daemon`` and real microVMs (TCG here):
create, output that streams while the command runs, a 10 MB binary round trip
byte-identical, files and commands (stdin, background handles, kill, timeouts), connect /
list / set_timeout / set_limits / logs / an idle policy (set on create, changed with
set_idle) / pause, hibernate and resume, an error of each main kind mapped to its class, and ``with``
killing the sandbox even when the block fails."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import unittest
from typing import Iterator, List, Tuple

import support

import forkd
from forkd import Sandbox

DAEMON: support.DaemonProcess
#: Most tests fork their sandbox from this (0.2 s) instead of booting one (4 s here).
TAG = "py-sandbox"


def setUpModule() -> None:
    global DAEMON
    DAEMON = support.start_module_daemon()
    forkd.Snapshot.create(TAG, image="busybox", url=DAEMON.url)


def create(**kwargs: object) -> Sandbox:
    """A sandbox forked from the module's snapshot, waiting out the daemon's boot cap."""
    return support.until_capacity(lambda: Sandbox.create(snapshot=TAG, url=DAEMON.url, **kwargs))  # type: ignore[arg-type]


def chunks_of(data: bytes, size: int) -> Iterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at : at + size]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class SandboxTest(unittest.TestCase):
    def test_create_stream_10mb_round_trip_then_kill(self) -> None:
        sbx = support.until_capacity(
            lambda: Sandbox.create("busybox", memory_mib=256, labels={"suite": "python"}, url=DAEMON.url)
        )
        self.addCleanup(sbx.__exit__, None, None, None)  # kills it if the test fails first
        self.assertEqual((sbx.info.state, sbx.info.image), ("running", "busybox"))
        # Started from the image's boot snapshot (docs/snapshots.md "Boot snapshots").
        self.assertTrue((sbx.info.snapshot or "").startswith("boot-"), sbx.info.snapshot)
        self.assertEqual((sbx.info.labels, sbx.info.memory_mib), ({"suite": "python"}, 256))
        self.assertRegex(sbx.id, r"^sbx-[0-9a-f]{12}$")

        arrivals: List[Tuple[float, str]] = []
        start = time.monotonic()
        result = sbx.commands.run(
            "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.2; done",
            on_stdout=lambda text: arrivals.append((time.monotonic() - start, text)),
        )
        ended = time.monotonic() - start
        expected = "".join(f"line {i}\n" for i in range(1, 7))
        self.assertEqual((result.exit_code, result.stdout), (0, expected), result.stderr)
        self.assertEqual("".join(t for _, t in arrivals), expected)
        self.assertGreaterEqual(len(arrivals), 3, "output came in one piece, not as it was made")
        self.assertLess(arrivals[0][0], ended - 0.6, "the first line arrived only at the end")

        data = os.urandom(10 * 1024 * 1024)
        written = sbx.files.write("/tmp/blob", chunks_of(data, 256 * 1024))  # streamed, chunked
        self.assertEqual(written.size, len(data))
        self.assertEqual(sbx.files.stat("/tmp/blob").size, len(data))
        self.assertEqual(sha256(sbx.files.read("/tmp/blob", format="bytes")), sha256(data))
        with sbx.files.read("/tmp/blob", format="stream") as stream:
            self.assertEqual(sha256(b"".join(stream)), sha256(data))
        in_guest = sbx.commands.run(["sha256sum", "/tmp/blob"])
        self.assertEqual(in_guest.stdout.split(" ")[0], sha256(data), "the guest holds the same bytes")

        sbx.kill()
        self.assertEqual(sbx.refresh().state, "stopped")

    def test_files(self) -> None:
        with create() as sbx:
            sbx.files.make_dir("/work/sub")
            sbx.files.write("/work/sub/a.txt", "hello ✓")
            entries = [(e.name, e.kind, e.size) for e in sbx.files.list("/work/sub")]
            self.assertEqual(entries, [("a.txt", "file", len("hello ✓".encode()))])
            self.assertEqual(sbx.files.read("/work/sub/a.txt"), "hello ✓")
            with tempfile.TemporaryFile() as local:
                local.write(b"\x00\xff" * 1000)
                local.seek(0)
                sbx.files.write("/work/bin", local, mode=0o700)  # a binary file, streamed
            self.assertEqual(sbx.files.read("/work/bin", format="bytes"), b"\x00\xff" * 1000)
            self.assertEqual(sbx.files.stat("/work/bin").mode & 0o777, 0o700)
            sbx.files.write("/deep/er/x", b"x", parents=True)
            self.assertTrue(sbx.files.exists("/deep/er/x"))
            sbx.files.remove("/work", recursive=True)
            self.assertFalse(sbx.files.exists("/work"))

    def test_commands(self) -> None:
        with create(envs={"FROM_CREATE": "yes"}) as sbx:
            r = sbx.commands.run('cat; echo " $PWD $FROM_CREATE $X"', stdin="in", cwd="/tmp", envs={"X": "x"})
            self.assertEqual(r.stdout, "in /tmp yes x\n")
            self.assertEqual(sbx.commands.run("echo err >&2; exit 3").stderr, "err\n")
            self.assertEqual(sbx.commands.run("exit 3").exit_code, 3)

            slow = sbx.commands.run("sleep 30", timeout=0.5)
            self.assertEqual((slow.timed_out, slow.exit_code), (True, None))

            cat = sbx.commands.run("cat", background=True, keep_stdin_open=True)
            cat.send_stdin("one ")
            cat.send_stdin(b"two")
            cat.close_stdin()
            self.assertEqual(cat.wait().stdout, "one two")

            sleeper = sbx.commands.run("sleep 60", background=True)
            self.assertGreater(sleeper.pid, 0)
            sleeper.kill("SIGTERM")
            self.assertEqual(sleeper.wait().signal, "SIGTERM")
            with self.assertRaises(forkd.ExecNotFoundError):
                sleeper.kill()

            raw: List[Tuple[str, bytes]] = []
            binary = sbx.commands.run(r"printf '\000\377'; printf 'e' >&2", on_output=lambda s, b: raw.append((s, b)))
            self.assertEqual(b"".join(b for s, b in raw if s == "stdout"), b"\x00\xff")
            self.assertEqual((binary.stdout, binary.stderr), ("", ""), "on_output keeps no second copy")

            with self.assertRaises(ZeroDivisionError):  # a failing callback fails the run
                sbx.commands.run("echo x", on_stdout=lambda text: print(1 / 0))

            texts: List[str] = []
            # One character written in two pieces arrives whole.
            sbx.commands.run(r"printf '\342'; sleep 0.3; printf '\234\223'", on_stdout=texts.append)
            self.assertEqual(texts, ["✓"])

    def test_connect_list_set_timeout_set_limits_logs(self) -> None:
        sbx = create(labels={"find": "me"}, idle={"pause_after_s": 300})
        try:
            idle = {"pause_after_s": 300, "hibernate_after_s": None, "source": "sandbox"}
            self.assertEqual(sbx.info.idle, idle)
            same = Sandbox.connect(sbx.id, url=DAEMON.url)
            self.assertEqual((same.id, same.sandbox_id, support.user_labels(same.info.labels)), (sbx.id, sbx.id, {"find": "me"}))
            listed = Sandbox.list(label="find=me", url=DAEMON.url)
            self.assertEqual([s.id for s in listed], [sbx.id])
            self.assertIn(sbx.id, [s.id for s in Sandbox.list(state="running", url=DAEMON.url)])
            self.assertIsNotNone(sbx.set_timeout(600).expires_at)
            self.assertEqual(sbx.info.expires_at, sbx.refresh().expires_at)
            self.assertIsNotNone(Sandbox.set_timeout(sbx.id, 700, url=DAEMON.url).expires_at)
            limits = sbx.set_limits({"cpu": 0.25, "pids": 96}).limits or {}
            self.assertEqual((limits.get("cpu"), limits.get("pids")), (0.25, 96))
            self.assertEqual(sbx.info.limits, sbx.refresh().limits)
            # A new idle policy while it runs: times left out keep their value.
            changed = {"pause_after_s": 300, "hibernate_after_s": 900, "source": "sandbox"}
            self.assertEqual(sbx.set_idle({"hibernate_after_s": 900}).idle, changed)
            with self.assertRaises(forkd.BadRequestError) as order:
                sbx.set_idle({"hibernate_after_s": 120})
            self.assertIn("300 (its current policy)", order.exception.message)
            never = Sandbox.set_idle(sbx.id, {"pause_after_s": 0}, url=DAEMON.url).idle or {}
            self.assertEqual((never.get("pause_after_s"), never.get("hibernate_after_s")), (None, 900))
            # None: its own policy dropped, the daemon's defaults (none in this daemon) again.
            daemons = {"pause_after_s": None, "hibernate_after_s": None, "source": "daemon"}
            self.assertEqual(sbx.set_idle(None).idle, daemons)
            self.assertEqual(sbx.refresh().idle, daemons)
            self.assertIn("forkd-agent", Sandbox.logs(sbx.id, url=DAEMON.url))
            self.assertIn("forkd-agent", sbx.logs())
            # Idle tiers: paused by hand, woken by a request or by resume (docs/idle.md).
            self.assertEqual((sbx.pause().tier, sbx.info.tier), ("paused", "paused"))
            self.assertEqual(sbx.commands.run("echo awake").stdout, "awake\n")
            self.assertEqual(sbx.refresh().tier, "running", "the command woke it")
            sbx.commands.run("echo kept > /tmp/note")
            hibernated = Sandbox.pause(sbx.id, tier="hibernated", url=DAEMON.url)
            self.assertEqual((hibernated.tier, hibernated.pid), ("hibernated", None))
            self.assertEqual(sbx.resume().tier, "running")
            self.assertEqual(sbx.files.read("/tmp/note"), "kept\n")
            self.assertEqual(Sandbox.resume(sbx.id, url=DAEMON.url).tier, "running", "a no-op")
            with self.assertRaises(forkd.BadRequestError):
                create(idle={"pause_after_s": 60, "hibernate_after_s": 30})
        finally:
            Sandbox.kill(sbx.id, url=DAEMON.url)
        self.assertEqual(Sandbox.connect(sbx.id, url=DAEMON.url).info.state, "stopped")

    def test_eval_in_an_image_without_python(self) -> None:
        # busybox has no python3: the context cannot start, and the error says so. A guest
        # agent built before code contexts (an initramfs not rebuilt since) is refused first,
        # with UnsupportedError naming the fix; either way a typed error, never a hang.
        with create() as sbx:
            with self.assertRaises((forkd.CommandNotFoundError, forkd.UnsupportedError)) as caught:
                sbx.eval("1 + 1")
            self.assertRegex(str(caught.exception), "python3|predates code contexts")

    def test_with_kills_even_when_the_block_fails(self) -> None:
        with self.assertRaises(ValueError):
            with create() as sbx:
                raise ValueError("the block failed")
        self.assertEqual(sbx.refresh().state, "stopped")
        sbx.__exit__(None, None, None)  # a sandbox already gone is not an error

    def test_an_error_of_each_kind(self) -> None:
        url = DAEMON.url
        # not found
        with self.assertRaises(forkd.SandboxNotFoundError) as nf:
            Sandbox.connect("sbx-000000000000", url=url)
        self.assertEqual((nf.exception.status, nf.exception.code), (404, "sandbox_not_found"))
        with self.assertRaises(forkd.SandboxNotFoundError):
            Sandbox.kill("sbx-000000000000", url=url)
        with self.assertRaises(forkd.SnapshotNotFoundError):
            Sandbox.create(snapshot="no-such-snapshot", url=url)
        # bad request / validation, with the field
        with self.assertRaises(forkd.BadRequestError) as bad:
            Sandbox.create(memory_mib=1, url=url)
        self.assertEqual(bad.exception.details, {"field": "body.memory_mib", "reason": "must be >= 64"})
        with self.assertRaises(forkd.BadRequestError):
            Sandbox.connect("../etc", url=url)
        with self.assertRaises(forkd.BadRequestError):
            Sandbox.create(labels={"bad key": "x"}, url=url)
        sbx = create()
        with sbx:
            with self.assertRaises(forkd.BadRequestError):
                sbx.commands.run("true", cwd="relative")
            with self.assertRaises(forkd.BadRequestError):
                sbx.commands.run("cat", keep_stdin_open=True)  # type: ignore[call-overload]
            with self.assertRaises(forkd.CommandNotFoundError):
                sbx.commands.run(["no-such-command"])
            with self.assertRaises(forkd.CommandNotFoundError):
                sbx.commands.run(["no-such-command"], on_stdout=print)
            with self.assertRaises(forkd.GuestFileNotFoundError):
                sbx.files.read("/no/such/file")
        # conflict: the sandbox is no longer running
        with self.assertRaises(forkd.SandboxNotRunningError) as conflict:
            sbx.commands.run("true")
        self.assertEqual(conflict.exception.status, 409)
        # an upload the daemon refuses before reading it all: its answer, not a broken pipe
        with self.assertRaises(forkd.SandboxNotRunningError):
            sbx.files.write("/x", chunks_of(os.urandom(8 << 20), 1 << 20))
        # a daemon older than the call: the route is named
        with self.assertRaises(forkd.NotFoundError) as old:
            forkd.Forkd(url).transport.json(forkd._transport.Request("GET", "/v1/sandboxes/x/tomorrow"))
        self.assertIn("GET /v1/sandboxes/x/tomorrow", old.exception.message)
        self.assertIn("older than this SDK", old.exception.message)
        # daemon unreachable
        with self.assertRaises(forkd.DaemonUnreachableError):
            Sandbox.list(url=f"unix:{DAEMON.home.dir}/run/none.sock")


if __name__ == "__main__":
    unittest.main()
