"""The error catalog and the Python classes stay in step: ``_catalog.py`` is exactly what
scripts/python-catalog.mjs makes of the TS SDK's ERROR_CATALOG (the test fails when they
drift), every code has its class, exported by name, and error answers decode to them."""

from __future__ import annotations

import builtins
import os
import shutil
import subprocess
import unittest

import support  # noqa: F401 (puts the package on sys.path)

import forkd
from forkd.errors import error_from_response

GENERATOR = os.path.join(support.REPO, "scripts", "python-catalog.mjs")


def class_name(code: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in code.split("_")) + "Error"


class CatalogTest(unittest.TestCase):
    def test_generated_catalog_matches_the_ts_catalog(self) -> None:
        node = shutil.which("node")
        self.assertIsNotNone(node, "node is needed to read the TS catalog")
        built = os.path.join(support.REPO, "packages", "sdk", "dist", "errors.js")
        self.assertTrue(os.path.exists(built), "build the TS SDK first: npm run build")
        run = subprocess.run(
            [str(node), GENERATOR, "--check"], capture_output=True, text=True, timeout=60
        )
        self.assertEqual(run.returncode, 0, run.stderr)

    def test_every_code_has_its_class_exported_by_name(self) -> None:
        self.assertGreater(len(forkd.ERROR_CATALOG), 20)
        for code, entry in forkd.ERROR_CATALOG.items():
            cls = getattr(forkd, class_name(code))
            self.assertIs(forkd.ERROR_CLASSES[code], cls)
            self.assertTrue(issubclass(cls, forkd.ForkdError), code)
            err = cls("m", {"x": 1})
            self.assertEqual((err.code, err.status, str(err), err.details), (code, entry.status, "m", {"x": 1}))
            self.assertIn(class_name(code), forkd.__all__)

    def test_timeout_and_unreachable_are_also_the_builtin_kinds(self) -> None:
        err = forkd.TimeoutError("slow", {"a": 1})
        self.assertIsInstance(err, builtins.TimeoutError)
        self.assertEqual((str(err), err.details, err.errno), ("slow", {"a": 1}, None))
        self.assertIsInstance(forkd.DaemonUnreachableError("down"), ConnectionError)

    def test_to_json_is_the_wire_form(self) -> None:
        err = forkd.BadRequestError("bad", {"field": "cpus"})
        self.assertEqual(
            err.to_json(), {"error": {"code": "bad_request", "message": "bad", "details": {"field": "cpus"}}}
        )


class FromResponseTest(unittest.TestCase):
    def test_an_error_body_decodes_to_its_class_with_details(self) -> None:
        err = error_from_response(
            404, {"error": {"code": "sandbox_not_found", "message": "no sandbox", "details": {"id": "x"}}}
        )
        self.assertIsInstance(err, forkd.SandboxNotFoundError)
        self.assertEqual((err.message, err.details), ("no sandbox", {"id": "x"}))

    def test_capacity_carries_retry_after(self) -> None:
        err = error_from_response(503, {"error": {"code": "capacity", "message": "busy"}}, 2.0)
        self.assertIsInstance(err, forkd.CapacityError)
        self.assertEqual(err.retry_after, 2.0)

    def test_an_unknown_code_or_no_error_body_falls_back_by_status(self) -> None:
        newer = error_from_response(409, {"error": {"code": "brand_new", "message": "hm"}})
        self.assertEqual(newer.code, "internal")
        self.assertEqual(newer.details, {"code": "brand_new", "status": 409})
        proxy = error_from_response(404, "<html>")
        self.assertIsInstance(proxy, forkd.NotFoundError)
        self.assertIn("HTTP 404", proxy.message)
        self.assertIsInstance(error_from_response(401, None), forkd.UnauthorizedError)
        self.assertIsInstance(error_from_response(504, None), forkd.TimeoutError)


if __name__ == "__main__":
    unittest.main()
