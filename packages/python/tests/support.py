"""What the end-to-end tests share: a private FORKD_HOME whose guest kernel and busybox
image are linked from the set-up home (as test/helpers/home.ts does), a real
``forkd daemon`` on it (the built CLI, as test/helpers/daemon-process.ts starts it), and a
module-wide fixture that tears all of it down by pid (sandboxes, snapshots, the daemon, any
QEMU left under the home, the temp dir), registered as module cleanups so it runs even when
set-up fails half way. Importing it puts packages/python on sys.path."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Callable, List, Optional, TypeVar

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(os.path.dirname(PACKAGE))
if PACKAGE not in sys.path:
    sys.path.insert(0, PACKAGE)

import forkd  # noqa: E402 (needs the path above)

CLI = os.path.join(REPO, "dist", "src", "cli", "main.js")
READY_S = 60.0
STOP_S = 15.0
T = TypeVar("T")


def base_home() -> str:
    """The home scripts/setup.sh prepared (kernel + busybox image)."""
    given = os.environ.get("FORKD_TEST_BASE_HOME")
    if given:
        return given
    return os.path.dirname(os.path.dirname(forkd.default_socket_path()))


#: The Debian image with python3, numpy and matplotlib that scripts/setup.sh builds for the
#: eval tests (test/helpers/python-image.ts).
PYTHON_IMAGE = "forkd-test-python"


class TestHome:
    """A temp FORKD_HOME sharing the base home's kernels and busybox image (and ``images``:
    more of its images, linked read-only)."""

    def __init__(self, images: "tuple[str, ...]" = ()) -> None:
        self.dir = tempfile.mkdtemp(prefix="forkd-py-")
        base = base_home()
        os.makedirs(os.path.join(self.dir, "images"))
        os.symlink(os.path.join(base, "kernels"), os.path.join(self.dir, "kernels"))
        for name in ("busybox", *images):
            os.symlink(os.path.join(base, "images", name), os.path.join(self.dir, "images", name))

    def private_guest(self) -> None:
        """Its own initramfs around this checkout's agent (the shared one may come from
        another checkout), the kernel files linked: ``forkd setup`` on the home."""
        shared = os.path.join(base_home(), "kernels")
        version = os.readlink(os.path.join(shared, "current"))
        os.unlink(os.path.join(self.dir, "kernels"))
        mine = os.path.join(self.dir, "kernels", version)
        os.makedirs(mine)
        for name in ("vmlinuz", "config", "modules"):
            if os.path.exists(os.path.join(shared, version, name)):
                os.symlink(os.path.join(shared, version, name), os.path.join(mine, name))
        os.symlink(version, os.path.join(self.dir, "kernels", "current"))
        env = {**os.environ, "FORKD_HOME": self.dir}
        subprocess.run(
            [shutil.which("node") or "node", CLI, "setup", "--json"],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300,
        )

    @property
    def url(self) -> str:
        """The ``unix:`` URL of the daemon's default socket in this home."""
        return f"unix:{os.path.join(self.dir, 'run', 'forkd.sock')}"

    def qemus(self) -> List[int]:
        """Pids of QEMU processes whose command line mentions this home."""
        pids = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
            except OSError:
                continue
            if cmd.startswith("qemu-system") and self.dir in cmd:
                pids.append(int(name))
        return pids

    def sandbox_dirs(self) -> List[str]:
        """Sandbox directories left in this home."""
        try:
            return os.listdir(os.path.join(self.dir, "sandboxes"))
        except FileNotFoundError:
            return []

    def cleanup(self) -> None:
        """End the QEMUs this home's daemon started (by pid, never by name); remove it."""
        for pid in self.qemus():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


class DaemonProcess:
    """``forkd daemon`` on a test home, ready once /healthz answers."""

    def __init__(self, home: TestHome, args: Optional[List[str]] = None) -> None:
        self.home = home
        self.url = home.url
        self.log_path = os.path.join(home.dir, "daemon.log")
        env = {**os.environ, "FORKD_HOME": home.dir}
        env.pop("FORKD_URL", None)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                # Never pauses on its own unless a test says so (its policies are checked).
                [shutil.which("node") or "node", CLI, "daemon", "--log-level", "warn",
                 "--pause-idle-after", "0", "--hibernate-idle-after", "0", *(args or [])],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        """The end of its log, for failure messages."""
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-8192:].decode(errors="replace")
        except OSError:
            return ""

    def _wait_ready(self) -> None:
        client = forkd.Forkd(self.url, request_timeout=1.0)
        deadline = time.monotonic() + READY_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"forkd daemon exited ({self.process.returncode}): {self.log()}")
            try:
                client.health()
                return
            except forkd.ForkdError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"forkd daemon not ready in {READY_S} s: {self.log()}")
                time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM and wait; SIGKILL after 15 s. Safe to call twice."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def remove_everything(url: str) -> None:
    """Kill every sandbox and remove every snapshot the daemon has (sandboxes outlive it)."""
    for info in forkd.Sandbox.list(url=url):
        if info.state in ("starting", "running"):
            try:
                forkd.Sandbox.kill(info.id, url=url)
            except forkd.SandboxNotFoundError:
                pass
    for snap in forkd.Snapshot.list(url=url):
        if snap.parent is None:
            try:
                forkd.Snapshot.remove(snap.tag, force=True, cascade=True, url=url)
            except forkd.SnapshotNotFoundError:
                pass


def assert_no_leftovers(home: TestHome) -> None:
    """No QEMU of this home runs and no sandbox directory is left (after everything was
    killed through the API): a module cleanup, so a leak fails the run."""
    deadline = time.monotonic() + 10.0
    while (home.qemus() or home.sandbox_dirs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    if home.qemus() or home.sandbox_dirs():
        raise AssertionError(f"left behind: QEMU pids {home.qemus()}, sandboxes {home.sandbox_dirs()}")


def user_labels(labels: "dict[str, str]") -> "dict[str, str]":
    """A sandbox's labels without ``forkd.request``, which the daemon sets on every sandbox it
    starts (so the sandboxes of a request a crash cut short can be found by it)."""
    assert labels.get("forkd.request"), f"no forkd.request label in {labels}"
    return {k: v for k, v in labels.items() if k != "forkd.request"}


def start_module_daemon(
    args: Optional[List[str]] = None, images: "tuple[str, ...]" = (), private_guest: bool = False
) -> DaemonProcess:
    """A home and a daemon for one test module, torn down at the module's end, even when
    this set-up itself fails half way (module cleanups run then too, last added first).
    ``images`` are more images of the set-up home to link (SkipTest when one is missing);
    ``private_guest`` gives the home this checkout's agent."""
    for name in images:
        if not os.path.exists(os.path.join(base_home(), "images", name, "image.json")):
            raise unittest.SkipTest(f"no {name} image in {base_home()}: run scripts/setup.sh")
    home = TestHome(images)
    unittest.addModuleCleanup(home.cleanup)
    unittest.addModuleCleanup(assert_no_leftovers, home)
    if private_guest:
        home.private_guest()
    daemon = DaemonProcess(home, args)
    unittest.addModuleCleanup(daemon.stop)
    unittest.addModuleCleanup(remove_everything, daemon.url)
    return daemon


#: A guest process whose state lives only in its memory: it answers each line written to
#: /tmp/q with its value on /tmp/r; "set X" changes the value first.
KEEPER = (
    "rm -f /tmp/q /tmp/r; mkfifo /tmp/q /tmp/r; v=none; "
    'while true; do read cmd arg < /tmp/q; [ "$cmd" = set ] && v=$arg; echo "$v" > /tmp/r; done'
)
#: Starts the keeper detached from the exec (the command returns, the keeper runs on).
START_KEEPER = f"({KEEPER}) </dev/null >/dev/null 2>&1 & while [ ! -p /tmp/r ]; do sleep 0.05; done"


def ask_keeper(words: str) -> str:
    """The command that asks the keeper (``get``, or ``set VALUE``) and prints its answer."""
    return f"echo {words} > /tmp/q; cat /tmp/r"


def until_capacity(make: Callable[[], T]) -> T:
    """Call ``make`` until the daemon has room: it caps concurrent boots with CapacityError
    (503 + Retry-After), and the tests start several at once."""
    while True:
        try:
            return make()
        except forkd.CapacityError as e:
            time.sleep(e.retry_after or 1.0)
