"""Builds through the Python SDK, end to end (real daemon and VMs, docs/build.md): a context
given as ``{path: content}`` builds a snapshot whose forks have the copied file, the RUN
step's result and the Dockerfile's ENV and WORKDIR; the same build again is all cached (sync
and async clients); a failing step raises ``BuildFailedError`` with its output and exit
code and publishes nothing; ``prune`` removes the step snapshots nothing uses."""

from __future__ import annotations

import asyncio
import unittest
from typing import Any, Dict, List

import support

import forkd
from forkd import AsyncForkd, Forkd, Snapshot

DAEMON: support.DaemonProcess
TAG = "py-built"

DOCKERFILE = "\n".join(
    [
        "FROM busybox",
        "ENV GREETING=hello",
        "WORKDIR /srv",
        "COPY greet.sh ./greet.sh",
        'RUN sh greet.sh > /srv/made.txt',
    ]
)
CONTEXT = {"Dockerfile": DOCKERFILE, "greet.sh": 'echo "$GREETING from the build"\n'}


def setUpModule() -> None:
    global DAEMON
    DAEMON = support.start_module_daemon()


def vm_steps(result: Dict[str, Any]) -> List[str]:
    """The status of each step that ran in a VM (config-only steps left out), in order."""
    return [s["status"] for s in result["steps"] if s["status"] != "config"]


class BuildsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Forkd(DAEMON.url)

    def test_1_build_then_fork(self) -> None:
        events: List[Dict[str, Any]] = []
        result = self.client.builds.build(CONTEXT, tag=TAG, on_event=events.append)
        self.assertEqual(result["tag"], TAG)
        self.assertEqual(vm_steps(result), ["ran", "ran"])
        self.assertIn("step_done", [e.get("type") for e in events], "events stream as they happen")
        with Snapshot.get(TAG, url=DAEMON.url).fork(1).sandboxes[0] as child:
            made = child.commands.run("cat /srv/made.txt").stdout
            self.assertEqual(made, "hello from the build\n")
            where = child.commands.run('echo "$(pwd) $GREETING"').stdout
            self.assertEqual(where, "/srv hello\n", "WORKDIR and ENV hold in the fork's exec")

    def test_2_rebuild_is_cached_sync_and_async(self) -> None:
        self.assertEqual(vm_steps(self.client.builds.build(CONTEXT, tag=TAG)), ["cached", "cached"])
        result = asyncio.run(AsyncForkd(DAEMON.url).builds.build(CONTEXT, tag=TAG))
        self.assertEqual(vm_steps(result), ["cached", "cached"])

    def test_3_failing_step_raises_with_output_and_code(self) -> None:
        broken = {"Dockerfile": "FROM busybox\nRUN echo out-marker; exit 3\n"}
        with self.assertRaises(forkd.BuildFailedError) as caught:
            self.client.builds.build(broken, tag="py-broken")
        details = caught.exception.details or {}
        self.assertEqual(details.get("exit_code"), 3)
        self.assertIn("out-marker", str(details.get("output")))
        tags = [s.tag for s in Snapshot.list(url=DAEMON.url)]
        self.assertNotIn("py-broken", tags, "nothing is published under the tag")

    def test_4_prune_keeps_what_a_result_is_built_on(self) -> None:
        self.client.builds.build(
            {**CONTEXT, "greet.sh": 'echo "$GREETING again"\n'}, tag=TAG
        )
        removed = self.client.builds.prune()
        self.assertTrue(removed, "the replaced build's COPY and RUN steps were unused")
        with Snapshot.get(TAG, url=DAEMON.url).fork(1).sandboxes[0] as child:
            self.assertEqual(child.commands.run("cat /srv/made.txt").stdout, "hello again\n")


if __name__ == "__main__":
    unittest.main()
