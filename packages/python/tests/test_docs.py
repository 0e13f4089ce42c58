"""docs/python.md shows only code that runs: every ``python`` block in it is one of
packages/python/examples/ verbatim (and every example is shown), and each example, like
the README's Python block, runs to success as a program of its own against a real daemon,
leaving no sandbox or snapshot; and the Install section's first block works with a python3
that has nothing but the standard library."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile
import unittest
from typing import Dict, List

import support

import forkd

DAEMON: support.DaemonProcess
DOC = os.path.join(support.REPO, "docs", "python.md")
README = os.path.join(support.REPO, "README.md")
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)
# The first sh block of the Install section, the one a new user runs first.
INSTALL_BLOCK = re.compile(r"^## Install\n.*?^```sh\n(.*?)^```$", re.M | re.S)
EXAMPLES = sorted(glob.glob(os.path.join(support.PACKAGE, "examples", "*.py")))


def setUpModule() -> None:
    global DAEMON
    DAEMON = support.start_module_daemon()


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def examples() -> Dict[str, str]:
    return {os.path.basename(p): read(p) for p in EXAMPLES}


class DocsTest(unittest.TestCase):
    def test_every_python_block_is_an_example_verbatim(self) -> None:
        blocks = PYTHON_BLOCK.findall(read(DOC))
        by_source = {source: name for name, source in examples().items()}
        for block in blocks:
            self.assertIn(block, by_source, f"a python block of docs/python.md is no example:\n{block[:300]}")
        shown = {by_source[b] for b in blocks if b in by_source}
        self.assertEqual(shown, set(examples()), "every example is shown in docs/python.md")

    def run_program(self, name: str, args: List[str]) -> None:
        env = {**os.environ, "FORKD_URL": DAEMON.url, "PYTHONPATH": support.PACKAGE}
        env.pop("FORKD_TOKEN", None)
        with self.subTest(program=name):
            run = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)
            self.assertEqual(run.returncode, 0, f"{run.stdout[-2000:]}\n{run.stderr[-3000:]}")
            running = [s.id for s in forkd.Sandbox.list(state="running", url=DAEMON.url)]
            self.assertEqual(running, [], "it left sandboxes running")
            self.assertEqual(forkd.Snapshot.list(url=DAEMON.url), [], "it left snapshots")

    def test_every_example_runs(self) -> None:
        self.assertGreaterEqual(len(EXAMPLES), 5)
        for path in EXAMPLES:
            self.run_program(os.path.basename(path), [path])

    def test_the_readme_python_block_runs(self) -> None:
        (block,) = PYTHON_BLOCK.findall(read(README))
        self.run_program("README.md", ["-c", block])

    def test_the_install_block_runs_on_a_plain_python3(self) -> None:
        # A python3 with the standard library only (no build, setuptools or pip), as on a
        # host whose python3 is not Debian's: what the Install section says must work there.
        match = INSTALL_BLOCK.search(read(DOC))
        assert match is not None, "docs/python.md has no sh block under ## Install"
        with tempfile.TemporaryDirectory(prefix="forkd-plain-python-") as venv:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
            env["PATH"] = f"{os.path.join(venv, 'bin')}:{env.get('PATH', '')}"
            run = subprocess.run(
                ["bash", "-ec", match.group(1)], cwd=support.REPO, env=env, capture_output=True, text=True, timeout=60
            )
        self.assertEqual(run.returncode, 0, f"{run.stdout}\n{run.stderr}")
        self.assertIn(f"forkd {forkd.__version__}", run.stdout)


if __name__ == "__main__":
    unittest.main()
