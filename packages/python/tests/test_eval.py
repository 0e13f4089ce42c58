"""Code contexts, eval fan-out and terminal sessions from Python, end to end: one sandbox
booted from the Debian Python image (this checkout's agent) serves every test of the
module — streamed eval output, context verbs, interrupt, eval_fork into two children, a
terminal over the SDK's own WebSocket client (resize, reattach, exit code, the session
list), and the asyncio twins."""

from __future__ import annotations

import asyncio
import threading
import time
import unittest
from typing import List

import support

import forkd
from forkd import AsyncSandbox, Sandbox

DAEMON: support.DaemonProcess
SBX: Sandbox


def setUpModule() -> None:
    global DAEMON, SBX
    DAEMON = support.start_module_daemon(images=(support.PYTHON_IMAGE,), private_guest=True)
    SBX = support.until_capacity(
        lambda: Sandbox.create(support.PYTHON_IMAGE, memory_mib=512, url=DAEMON.url)
    )
    SBX.eval("x = 41")


def until(check: "object", what: str, seconds: float = 30.0) -> None:
    """Poll ``check()`` (bounded) until it is true."""
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)


class EvalTest(unittest.TestCase):
    def test_run_code_is_an_alias_of_eval(self) -> None:
        self.assertEqual(SBX.run_code("x").text, SBX.eval("x").text)
        self.assertIs(forkd.Sandbox.run_code, forkd.Sandbox.eval)
        self.assertIs(forkd.AsyncSandbox.run_code, forkd.AsyncSandbox.eval)

    def test_streamed_output_results_and_errors(self) -> None:
        printed: List[str] = []
        results: List[forkd.Result] = []
        x = SBX.eval(
            "import sys\nfor i in range(3): print(i, flush=True)\nprint('e', file=sys.stderr)\nx + 1",
            on_stdout=printed.append,
            on_result=results.append,
        )
        self.assertEqual("".join(printed), "0\n1\n2\n")
        self.assertEqual(("".join(x.stdout), "".join(x.stderr)), ("0\n1\n2\n", "e\n"))
        self.assertEqual((x.text, results[0].json, x.error), ("42", 42, None))
        errors: List[forkd.ExecutionError] = []
        failed = SBX.eval("1 / 0", on_error=errors.append)
        assert failed.error is not None
        self.assertEqual((failed.error.name, errors[0].name), ("ZeroDivisionError", "ZeroDivisionError"))
        self.assertIn('File "<cell>", line 1', failed.error.traceback)

    def test_context_verbs_and_interrupt(self) -> None:
        ctx = SBX.contexts.create("b", cwd="/tmp", envs={"MODE": "test"})
        self.addCleanup(_quiet_remove, "b")
        self.assertEqual((ctx.name, ctx.cwd, ctx.alive), ("b", "/tmp", True))
        here = SBX.eval("import os\ny = 1\nos.getcwd(), os.environ['MODE']", context="b")
        self.assertEqual(here.results[0].json, ["/tmp", "test"])
        self.assertEqual({c.name for c in SBX.contexts.list()}, {"python", "b"})
        with self.assertRaises(forkd.NameTakenError):
            SBX.contexts.create("b")

        answer: List[forkd.Execution] = []
        started = threading.Event()
        runner = threading.Thread(
            target=lambda: answer.append(
                SBX.eval(
                    "import time\nprint('sleeping', flush=True)\ntime.sleep(60)",
                    context="b",
                    on_stdout=lambda _: started.set(),
                )
            )
        )
        runner.start()
        self.assertTrue(started.wait(60), "the code never started")
        SBX.contexts.interrupt("b")
        runner.join(60)
        self.assertEqual(answer[0].error.name if answer[0].error else None, "KeyboardInterrupt")
        self.assertEqual(SBX.eval("y", context="b").text, "1", "the state survived the interrupt")

        restarted = SBX.contexts.restart("b")
        self.assertEqual(restarted.cwd, "/tmp")
        gone = SBX.eval("y", context="b").error
        self.assertEqual(gone.name if gone else None, "NameError")
        SBX.contexts.remove("b")
        with self.assertRaises(forkd.ContextNotFoundError):
            SBX.eval("1", context="b")

    def test_eval_fork_runs_each_variant_in_its_own_child(self) -> None:
        fanned = SBX.eval_fork(["x + 1", "x + 2"])
        self.addCleanup(_quiet_remove_snapshot, fanned.snapshot)
        self.assertEqual([r.index for r in fanned.results], [0, 1])
        self.assertEqual([r.failure for r in fanned.results], [None, None])
        self.assertEqual([r.execution.text if r.execution else None for r in fanned.results], ["42", "43"])
        children = {r.sandbox for r in fanned.results}
        self.assertEqual(len(children), 2)
        running = {s.id for s in Sandbox.list(state="running", url=DAEMON.url)}
        self.assertEqual(children & running, set(), "the children were not killed")
        self.assertEqual(SBX.eval("x").text, "41", "the source is untouched")


class PtyTest(unittest.TestCase):
    def test_terminal_resize_reattach_list_and_exit_code(self) -> None:
        out = bytearray()
        term = SBX.pty.create(cols=80, rows=24, cmd="sh", on_data=out.extend)
        self.assertRegex(term.session, r"^pty-\d+$")
        term.resize(100, 30)
        term.send_input("stty size; echo mark-$((6*7))\r")
        until(lambda: b"mark-42" in out, "the command's output")
        self.assertIn(b"30 100", bytes(out))
        listed = {s.session: s for s in SBX.pty.list()}
        self.assertTrue(listed[term.session].attached)

        term.disconnect()
        until(lambda: not {s.session: s for s in SBX.pty.list()}[term.session].attached, "detached")
        again = bytearray()
        back = SBX.pty.connect(term.session, since=0, on_data=again.extend)
        until(lambda: b"mark-42" in again, "the replay")
        back.send_input("exit 3\r")
        self.assertEqual(back.wait(60).exit_code, 3)
        self.assertNotIn(term.session, {s.session for s in SBX.pty.list()})

    def test_a_refused_open_raises_its_catalog_error(self) -> None:
        with self.assertRaises(forkd.BadRequestError):
            SBX.pty.create(cols=0, rows=24, on_data=lambda _: None)
        with self.assertRaises(forkd.PtySessionNotFoundError):
            SBX.pty.connect("pty-999999", on_data=lambda _: None)


class AsyncEvalTest(unittest.TestCase):
    def test_async_eval_contexts_and_pty(self) -> None:
        async def main() -> None:
            sbx = await AsyncSandbox.connect(SBX.id, url=DAEMON.url)
            seen: List[str] = []

            async def on_stdout(text: str) -> None:
                seen.append(text)

            x = await sbx.eval("print('hi')\nx * 2", on_stdout=on_stdout)
            self.assertEqual(("".join(seen), x.text), ("hi\n", "82"))
            self.assertEqual((await sbx.run_code("x")).text, "41", "the alias, awaited")
            self.assertIn("python", [c.name for c in await sbx.contexts.list()])
            out = bytearray()
            term = await sbx.pty.create(cmd="sh", on_data=out.extend)
            await term.send_input("exit 5\r")
            self.assertEqual((await term.wait(60)).exit_code, 5)

        asyncio.run(main())


def _quiet_remove(name: str) -> None:
    try:
        SBX.contexts.remove(name)
    except forkd.ContextNotFoundError:
        pass


def _quiet_remove_snapshot(tag: str) -> None:
    """The fan-out's branch stays (the source's disk layers on it): module cleanup removes
    it with the source; nothing to do here but make sure its children are gone."""
    for info in Sandbox.list(url=DAEMON.url):
        if info.snapshot == tag and info.state == "running":
            Sandbox.kill(info.id, url=DAEMON.url)


if __name__ == "__main__":
    unittest.main()
