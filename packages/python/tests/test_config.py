"""Finding the daemon by the TS SDK's rules (FORKD_URL, FORKD_TOKEN, the default socket
under FORKD_HOME), and connection problems that fail fast with a clear error: no socket, a
socket nobody listens on, a daemon that accepts and never answers (the request_timeout),
a host that does not resolve, an answer cut short or that is no forkd answer. No daemon
is needed: the listeners here are real sockets that answer what a broken one would."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
import unittest
from typing import List, Optional

import support  # noqa: F401 (puts the package on sys.path)

import forkd
from forkd import parse_url, resolve_config
from forkd._transport import Request


class UrlTest(unittest.TestCase):
    def test_unix_urls(self) -> None:
        self.assertEqual(parse_url("unix:/run/x.sock").socket_path, "/run/x.sock")
        self.assertEqual(parse_url("unix:///run/x.sock").socket_path, "/run/x.sock")
        self.assertEqual(parse_url("unix:rel.sock").socket_path, "rel.sock")

    def test_http_urls(self) -> None:
        ep = parse_url("https://forkd.internal:7070/api/")
        self.assertEqual((ep.kind, ep.host, ep.port, ep.base_path), ("https", "forkd.internal", 7070, "/api"))
        self.assertEqual(parse_url("http://127.0.0.1").port, 80)
        self.assertEqual(parse_url("https://[::1]").host, "::1")
        self.assertEqual(parse_url("https://h").port, 443)

    def test_other_urls_are_bad_requests(self) -> None:
        for url in ("unix:", "ftp://x", "localhost:7070", "http://h:notaport"):
            with self.assertRaises(forkd.BadRequestError, msg=url) as caught:
                parse_url(url)
            self.assertEqual(caught.exception.details, {"url": url})


class ResolveTest(unittest.TestCase):
    def test_explicit_then_environment_then_default_socket(self) -> None:
        env = {"FORKD_URL": "http://h:1", "FORKD_TOKEN": "t", "FORKD_HOME": "/srv/f"}
        self.assertEqual(resolve_config("unix:/a", env=env).url, "unix:/a")
        self.assertEqual(resolve_config("unix:/a", "mine", env=env).token, "mine")
        from_env = resolve_config(env=env)
        self.assertEqual((from_env.url, from_env.token, from_env.explicit), ("http://h:1", "t", True))
        default = resolve_config(env={"FORKD_HOME": "/srv/f", "FORKD_URL": "", "FORKD_TOKEN": ""})
        self.assertEqual((default.url, default.token, default.explicit), ("unix:/srv/f/run/forkd.sock", None, False))

    def test_default_home_by_user(self) -> None:
        expected = (
            "/var/lib/forkd/run/forkd.sock"
            if os.getuid() == 0
            else os.path.expanduser("~/.local/share/forkd/run/forkd.sock")
        )
        self.assertEqual(forkd.default_socket_path({}), expected)

    def test_request_timeout(self) -> None:
        self.assertEqual(resolve_config(env={}).request_timeout, 60.0)
        self.assertEqual(resolve_config(request_timeout=2.5, env={}).request_timeout, 2.5)
        with self.assertRaises(forkd.BadRequestError):
            resolve_config(request_timeout=0, env={})


class Listener:
    """A unix socket server: it answers each connection with ``reply`` once the request's
    head arrived, then hangs up; with no reply it never answers (a hung daemon)."""

    def __init__(self, path: str, reply: Optional[bytes] = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.reply = reply
        self.accepted: List[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while True:
                conn = self.sock.accept()[0]
                self.accepted.append(conn)
                if self.reply is not None:
                    conn.recv(65536)
                    conn.sendall(self.reply)
                    conn.close()
        except OSError:
            return

    def close(self) -> None:
        for conn in self.accepted:
            conn.close()
        self.sock.close()


class UnreachableTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="forkd-py-conn-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def assert_unreachable(
        self, url: str, errno: str, within: float = 2.0
    ) -> forkd.DaemonUnreachableError:
        start = time.monotonic()
        with self.assertRaises(forkd.DaemonUnreachableError) as caught:
            forkd.Sandbox.list(url=url)
        self.assertLess(time.monotonic() - start, within)
        err = caught.exception
        self.assertEqual((err.code, err.status, err.details), ("daemon_unreachable", 503, {"url": url, "errno": errno}))
        self.assertIn(url, err.message)
        return err

    def test_no_socket(self) -> None:
        err = self.assert_unreachable(f"unix:{self.dir}/none.sock", "ENOENT")
        self.assertIn("start it with `forkd daemon`", err.message)

    def test_nobody_listening(self) -> None:
        path = os.path.join(self.dir, "dead.sock")
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(path)
        dead.close()  # the file stays, nobody listens: ECONNREFUSED
        self.assert_unreachable(f"unix:{path}", "ECONNREFUSED")

    def test_refused_tcp(self) -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        self.assert_unreachable(f"http://127.0.0.1:{port}", "ECONNREFUSED")

    def test_unknown_host(self) -> None:
        # Name resolution is the resolver's to bound, not a socket timeout's.
        self.assert_unreachable("http://no-such-host.invalid:7070", "ENOTFOUND", within=30.0)

    def test_a_daemon_that_never_answers_times_out(self) -> None:
        path = os.path.join(self.dir, "silent.sock")
        listener = Listener(path)
        self.addCleanup(listener.close)
        start = time.monotonic()
        with self.assertRaises(forkd.TimeoutError) as caught:
            forkd.Sandbox.list(url=f"unix:{path}", request_timeout=0.5)
        self.assertLess(time.monotonic() - start, 3.0)
        self.assertIn("nothing within 0.5 s", caught.exception.message)
        self.assertIsInstance(caught.exception, TimeoutError)  # the builtin too

    def listen(self, reply: bytes) -> str:
        path = os.path.join(self.dir, "canned.sock")
        listener = Listener(path, reply)
        self.addCleanup(listener.close)
        return f"unix:{path}"

    def test_a_body_cut_short_is_an_error_not_a_short_result(self) -> None:
        url = self.listen(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
        with self.assertRaises(forkd.DaemonUnreachableError) as caught:
            forkd.Forkd(url).transport.bytes(Request("GET", "/v1/sandboxes/x/files"))
        self.assertIn("broke while reading the answer", caught.exception.message)

    def test_an_answer_that_is_not_json_is_an_internal_error(self) -> None:
        url = self.listen(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
        with self.assertRaises(forkd.InternalError) as caught:
            forkd.Sandbox.list(url=url)
        self.assertIn("is FORKD_URL a forkd daemon", caught.exception.message)

    def test_an_error_page_that_is_not_json_maps_by_status(self) -> None:
        url = self.listen(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 6\r\n\r\n<html>")
        with self.assertRaises(forkd.InternalError) as caught:
            forkd.Sandbox.list(url=url)
        self.assertEqual(caught.exception.message, "the forkd daemon answered HTTP 502")

    def test_instance_calls_refuse_connection_arguments(self) -> None:
        info = forkd.SandboxInfo("sbx-000000000000", "running", None, None, None, 256, 1, {}, "", None, None)
        sbx = forkd.Sandbox(forkd.Forkd("unix:/nowhere.sock"), info)
        with self.assertRaises(TypeError):
            sbx.kill(url="unix:/other.sock")


if __name__ == "__main__":
    unittest.main()
