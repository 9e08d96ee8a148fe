"""A private index's credential reaches a lock's downloads by one rule, whatever the lock's format:
it is used where the index the lock names lies under the credential's URL (the same scheme, host
and port, and a path at or below the credential's, at a '/' boundary), and nowhere else.

What a user does: the index's user and password in PIP_INDEX_URL (envkit reads ENVKIT_INDEX_URL,
PIP_INDEX_URL and UV_INDEX_URL the same way), then `envkit setup --lock FILE`. The index here is a
server on 127.0.0.1 that answers 401 to any request without that user and password, and records
which requests carried them; its wheel files live beside the index, not under it (as on GitLab's
and Artifactory's PyPI registries), so the rule must follow the index the file belongs to."""

from __future__ import annotations

import base64
import html
import platform
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from localindex import build_wheel, file_sha256, installed
from test_pylock import run

USER, PASSWORD = "bob", "s3cret-Pw"
TORCH = "2.6.0+cpu"


class PrivateIndex:
    """Every path needs Basic auth USER:PASSWORD. `<index>/torch/` is a PEP 503 page linking to
    `/files<index>/<wheel>`; any path ending in the wheel's file name serves the wheel."""

    def __init__(self, wheel: Path):
        self.wheel = wheel
        self.seen: list[tuple[str, bool]] = []  # (path, carried the right credential)
        want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                ok = self.headers.get("Authorization") == want
                server.seen.append((self.path, ok))
                if not ok:
                    return self._send(401, b"credentials needed", {"WWW-Authenticate": 'Basic realm="private"'})
                path = unquote(self.path.split("?")[0])
                if path.endswith("/" + wheel.name):
                    return self._send(200, wheel.read_bytes())
                if path.rstrip("/").endswith("/torch"):
                    index_path = path.rstrip("/")[:-len("/torch")]
                    link = f"/files{index_path}/{quote(wheel.name)}#sha256={file_sha256(wheel)}"
                    return self._send(200, f'<a href="{link}">{html.escape(wheel.name)}</a>'.encode(),
                                      {"Content-Type": "text/html"})
                self._send(404, b"not found")

            def _send(self, code, body, headers=None):
                self.send_response(code)
                for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wheel_url(self, index_path: str) -> str:
        return f"{self.base}/files{index_path}/{quote(self.wheel.name)}"


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    wheel = build_wheel(tmp_path_factory.mktemp("private-wheels"), "torch", TORCH)
    srv = PrivateIndex(wheel)
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _pylock(srv, index: str) -> str:
    """A PEP 751 lock as any tool writes it: the package names its index and its wheel's URL."""
    w = srv.wheel
    return (f'lock-version = "1.0"\ncreated-by = "a test"\n\n[[packages]]\nname = "torch"\nversion = "{TORCH}"\n'
            f'index = "{srv.base}{index}"\n'
            f'wheels = [{{ url = "{srv.wheel_url(index)}", size = {w.stat().st_size}, '
            f'hashes = {{ sha256 = "{file_sha256(w)}" }} }}]\n')


def _machine() -> str:
    """This machine as a machine lock's platform table names it (from the interpreter, not envkit)."""
    return (f'system = "{platform.system()}"\narch = "{platform.machine()}"\n'
            f'python_minor = "{sys.version_info[0]}.{sys.version_info[1]}"\nbackend = "cpu"\n')


def _machine_lock(srv, index: str) -> str:
    """pylock.machine.toml as `envkit setup` writes it now: a pylock of one target, the machine, profile and
    source in [tool.envkit]; the index is the lock's source, not named per package."""
    w = srv.wheel
    return (f'lock-version = "1.0"\ncreated-by = "envkit"\n\n[[packages]]\nname = "torch"\nversion = "{TORCH}"\n'
            f'wheels = [{{ url = "{srv.wheel_url(index)}", hashes = {{ sha256 = "{file_sha256(w)}" }} }}]\n\n'
            f'[tool.envkit]\nenvkit = "0.1.0"\n\n[tool.envkit.platform]\n{_machine()}\n'
            f'[tool.envkit.profile]\nname = "cpu"\n\n'
            f'[tool.envkit.source]\ntorch = "2.6.0"\nindex_urls = ["{srv.base}{index}"]\n')


def _old_envkit_lock(srv, index: str) -> str:
    """envkit.lock as envkit wrote it before (lock_version = 1), still read."""
    return (f'lock_version = 1\nenvkit = "0.1.0"\n\n[platform]\n{_machine()}\n[profile]\nname = "cpu"\n\n'
            f'[source]\ntorch = "2.6.0"\nindex_urls = ["{srv.base}{index}"]\n\n[env]\n\n'
            f'[[package]]\nname = "torch"\nversion = "{TORCH}"\nsha256 = "{file_sha256(srv.wheel)}"\n'
            f'url = "{srv.wheel_url(index)}"\n')


FORMATS = {"pylock.toml": _pylock, "pylock.machine.toml": _machine_lock, "envkit.lock (old format)": _old_envkit_lock}

# (the credential's URL, the path of the index the lock names, is the credential sent)
CASES = {
    "the same index URL": ("http://{auth}@127.0.0.1:{port}/simple", "/simple", True),
    "the same host, another path": ("http://{auth}@127.0.0.1:{port}/other/simple", "/simple", False),
    "another scheme": ("https://{auth}@127.0.0.1:{port}/simple", "/simple", False),
    "another host": ("http://{auth}@localhost:{port}/simple", "/simple", False),
    "a path sharing only a string prefix": ("http://{auth}@127.0.0.1:{port}/simple", "/simple-evil", False),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_private_index_credential_is_matched_by_one_rule_in_every_lock_format(private, venv, tmp_path, fmt, case):
    credential, index, used = CASES[case]
    name = fmt.split()[0]
    (tmp_path / name).write_text(FORMATS[fmt](private, index))
    (tmp_path / "netrc").write_text("")  # no ~/.netrc of this machine answers for the index
    private.seen.clear()
    r = run("setup", "--lock", name, "--yes", "--no-selftest", "--venv", str(venv), cwd=tmp_path,
            env={"PIP_INDEX_URL": credential.format(auth=f"{USER}:{PASSWORD}", port=private.port),
                 "ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "NETRC": str(tmp_path / "netrc")})
    sent = [path for path, ok in private.seen if ok]
    refused = "answered HTTP 401: the index wants a user and password" in r.stderr
    want = (0, True, False, TORCH) if used else (2, False, True, None)
    assert (r.returncode, bool(sent), refused, installed(venv).get("torch")) == want, r.stdout + r.stderr
    assert PASSWORD not in r.stdout + r.stderr
