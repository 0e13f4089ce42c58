"""The package as shipped: one version number with package.json and pyproject.toml, a
wheel that builds offline with Debian's tools (``python3 -m build --no-isolation`` from
python3-build over python3-setuptools, which scripts/setup.sh installs) and carries
py.typed and the generated catalog, and a module that imports on the oldest Python it
claims (3.9) when that interpreter is here."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import zipfile

import support

import forkd


def pyenv_python39() -> str:
    """A Python 3.9 interpreter, if this machine has one."""
    found = shutil.which("python3.9")
    candidates = [found] if found else []
    candidates += glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9"))
    for path in candidates:
        if path and subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            return path
    return ""


#: The distribution's interpreter, whose packages (python3-build, …) apt installs.
DEBIAN_PYTHON = "/usr/bin/python3"


class PackagingTest(unittest.TestCase):
    def test_one_version_number(self) -> None:
        with open(os.path.join(support.REPO, "package.json"), encoding="utf-8") as f:
            npm_version = json.load(f)["version"]
        with open(os.path.join(support.PACKAGE, "pyproject.toml"), encoding="utf-8") as f:
            match = re.search(r'^version = "([^"]+)"', f.read(), re.M)
        self.assertIsNotNone(match)
        self.assertEqual({forkd.__version__, npm_version, match.group(1) if match else ""}, {npm_version})

    def test_wheel_builds_offline_with_py_typed_and_catalog(self) -> None:
        work = tempfile.mkdtemp(prefix="forkd-py-wheel-")
        self.addCleanup(shutil.rmtree, work, True)
        # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
        source = os.path.join(work, "src")
        shutil.copytree(support.PACKAGE, source, ignore=shutil.ignore_patterns("__pycache__", ".mypy_cache"))
        build = subprocess.run(
            [DEBIAN_PYTHON, "-m", "build", "--wheel", "--no-isolation", "--outdir", work, source],
            capture_output=True, text=True, timeout=300,
        )
        self.assertEqual(build.returncode, 0, build.stdout + build.stderr)
        (wheel,) = glob.glob(os.path.join(work, "forkd-*.whl"))
        names = set(zipfile.ZipFile(wheel).namelist())
        for name in ("forkd/__init__.py", "forkd/py.typed", "forkd/_catalog.py", "forkd/_async.py"):
            self.assertIn(name, names)
        self.assertFalse([n for n in names if n.startswith("tests/")], "tests are not shipped")

    def test_imports_on_python_3_9(self) -> None:
        python39 = pyenv_python39()
        if not python39:
            self.skipTest("no Python 3.9 on this machine")
        run = subprocess.run(
            [python39, "-c", "import forkd, forkd.errors; print(forkd.AsyncSandbox.kill)"],
            cwd=support.PACKAGE, capture_output=True, text=True, timeout=60,
        )
        self.assertEqual(run.returncode, 0, run.stderr)


if __name__ == "__main__":
    unittest.main()
