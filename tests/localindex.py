"""A real package index on 127.0.0.1 for tests: tiny wheels built here, served as PEP 691 JSON
(when the Accept header asks for it) and PEP 503 HTML, plus misbehaving modes.

URL layout (``base = http://127.0.0.1:PORT``):
  {base}/json/simple/<project>/     JSON when asked, HTML otherwise (like PyPI)
  {base}/html/simple/<project>/     HTML only (like download.pytorch.org)
  {base}/broken/simple/<project>/   like json, plus torch 2.7.0+cpu whose `import torch` raises
  {base}/garbage/simple/<project>/  200 with bytes that are no index page
  {base}/slow/simple/<project>/     answers after `slow_seconds`
  {base}/tampered/simple/<project>/ like json, plus torch 2.7.1+cpu whose file is served with one byte changed
  {base}/stall/simple/<project>/    like json, plus torch 2.7.2+cpu whose file takes `stall_seconds` to arrive
  {base}/whl/<group>/<project>/      HTML, the wheels of group <group> (download.pytorch.org/whl/cu126/torch/,
                                    group "nightly/cu130" for /whl/nightly/cu130/torch/)
  {base}/files/<wheel>              the wheels
  {base}/pypi/simple/<project>/     the "pypi" group like PyPI today: JSON (PEP 691 v1.1, with `size`)
                                    or HTML, both offering PEP 658 metadata
  {base}/whl/<build>/<project>/     the <build> group ("cpu", "cu130", ...) like download.pytorch.org:
                                    HTML with `data-dist-info-metadata`, no sizes
  {base}/files/<wheel>.metadata     a wheel's METADATA (PEP 658)
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import socket
import sys
import sysconfig
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

PLATFORM = sysconfig.get_platform().replace("-", "_").replace(".", "_")  # linux_x86_64
PY = f"cp{sys.version_info.major}{sys.version_info.minor}"

# A fake torch good enough for envkit's verification: arange/reshape/@/T/sum, version, backends.
FAKE_TORCH = '''
__version__ = {version!r}
float32 = "float32"
class version:
    cuda = {cuda!r}
class _T:
    def __init__(self, rows):
        self.rows = rows
    def reshape(self, r, c):
        flat = [x for row in self.rows for x in row]
        return _T([flat[i * c:(i + 1) * c] for i in range(r)])
    @property
    def T(self):
        return _T([list(x) for x in zip(*self.rows)])
    def __matmul__(self, other):
        return _T([[sum(a * b for a, b in zip(r, col)) for col in zip(*other.rows)] for r in self.rows])
    def sum(self):
        return sum(sum(r) for r in self.rows)
def arange(n, dtype=None):
    return _T([list(range(n))])
class backends:
    class mps:
        @staticmethod
        def is_available():
            return False
class cuda:
    @staticmethod
    def is_available():
        return False
'''


def build_wheel(directory: Path, name: str, version: str, tag: str = f"py3-none-{PLATFORM}", *,
                module: str | None = None, requires: list[str] | None = None, requires_python: str | None = None) -> Path:
    """Write a minimal valid wheel (METADATA, WHEEL, RECORD) and return its path. `requires_python`
    goes into METADATA, and the index serves it as PyPI does (PEP 691 `requires-python`, PEP 503
    `data-requires-python`)."""
    dist = name.replace("-", "_")
    filename = f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    if module is None:
        module = FAKE_TORCH.format(version=version, cuda=None) if name == "torch" else f"__version__ = {version!r}\n"
    files = {
        f"{dist}/__init__.py": module,
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}{}".format(
            name, version, f"Requires-Python: {requires_python}\n" if requires_python else "",
            "".join(f"Requires-Dist: {r}\n" for r in requires or [])),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: envkit-tests\nRoot-Is-Purelib: false\nTag: {tag}\n",
    }
    record = []
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, text in files.items():
            data = text.encode()
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    out = Path(directory) / filename
    out.write_bytes(buf.getvalue())
    return out


BROKEN_TORCH = "raise ImportError('libtorch_cpu.so: cannot open shared object file (a broken build, on purpose)')\n"


def build_all(directory: Path) -> dict[str, list[Path]]:
    """The wheels of the test index: {"good": [...], "broken": [...]} (broken = good + a bad upgrade)."""
    directory.mkdir(parents=True, exist_ok=True)
    good = [
        build_wheel(directory, "torch", "2.5.1+cpu"),
        build_wheel(directory, "torch", "2.6.0+cpu"),
        build_wheel(directory, "torch", "2.7.0rc1+cpu"),
        build_wheel(directory, "torch", "2.8.0.dev20250101+cpu"),
        build_wheel(directory, "torch", "2.8.0.dev20241215+cpu"),
        build_wheel(directory, "torch", "2.9.0+cu128"),  # a CUDA build: never on a CPU-only box
        build_wheel(directory, "torch", "2.9.0+cpu", tag="py3-none-macosx_11_0_arm64"),  # wrong platform
        build_wheel(directory, "torch", "2.9.1+cpu", tag="cp27-cp27mu-linux_x86_64"),  # wrong Python
        build_wheel(directory, "torchvision", "0.20.1+cpu"),
        build_wheel(directory, "torchvision", "0.21.0+cpu"),
        build_wheel(directory, "torchvision", "0.22.0+cpu", tag="py3-none-macosx_11_0_arm64"),
    ]
    broken = good + [build_wheel(directory, "torch", "2.7.0+cpu", module=BROKEN_TORCH)]
    tampered = good + [build_wheel(directory, "torch", "2.7.1+cpu")]
    stall = good + [build_wheel(directory, "torch", "2.7.2+cpu")]
    return {"good": good, "broken": broken, "tampered": tampered, "stall": stall}


_SHA_CACHE: dict[tuple, str] = {}


def file_sha256(path: Path) -> str:
    """A wheel's sha256, computed once per content (a real torch wheel is ~190 MB)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


def wheel_metadata(path: Path) -> bytes:
    """The METADATA file inside a wheel, as PEP 658 serves it."""
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return zf.read(name)


def requires_python(path: Path) -> str | None:
    """The wheel's Requires-Python, as an index publishes it beside the file."""
    for line in wheel_metadata(path).decode().splitlines():
        if line.startswith("Requires-Python:"):
            return line.partition(":")[2].strip()
    return None


def _json_file(w: Path, **extra) -> dict:
    entry = {"filename": w.name, "url": f"../../../files/{quote(w.name)}", **extra}
    if requires_python(w):
        entry["requires-python"] = requires_python(w)
    return entry


def _link(w: Path, fragment: str, attrs: str = "") -> str:
    rp = requires_python(w)
    attrs += f' data-requires-python="{html.escape(rp)}"' if rp else ""
    return f'<a href="/files/{quote(w.name)}#{fragment}"{attrs}>{html.escape(w.name)}</a><br/>'


class QuietServer(ThreadingHTTPServer):
    """A client that hung up (envkit gives up on a slow index after ENVKIT_INDEX_TIMEOUT, as tested) is
    not the server's error: without this, socketserver prints the BrokenPipeError's traceback to
    sys.stderr, which an in-process CliRunner test reads as the command's own output."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class LocalIndex:
    """Serve the wheels on 127.0.0.1 in a thread. Use as a context manager."""

    def __init__(self, wheels: dict[str, list[Path]], slow_seconds: float = 3.0, stall_seconds: float = 60.0):
        self.wheels = wheels
        self.slow_seconds = slow_seconds
        self.stall_seconds = stall_seconds
        self.unstall = threading.Event()  # set: a stalled download goes on at once (the test has seen what it waited for)
        self.requests: list[tuple[str, str]] = []  # (path, Accept)
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                index.requests.append((self.path, self.headers.get("Accept", "")))
                parts = [unquote(p) for p in self.path.split("?")[0].split("/") if p]
                if len(parts) == 2 and parts[0] == "files" and parts[1].endswith(".whl.metadata"):
                    return self._metadata(parts[1][:-len(".metadata")])
                if len(parts) == 2 and parts[0] == "files":
                    return self._file(parts[1])
                if len(parts) in (3, 4) and parts[0] == "whl":  # download.pytorch.org: /whl/[nightly/]<build>/<project>/
                    return self._project("whl", parts[-1], group="/".join(parts[1:-1]))
                if len(parts) == 3 and parts[1] == "simple":
                    return self._project(parts[0], parts[2])
                self._send(404, "text/plain", b"not found")

            def do_HEAD(self):  # uv asks for a file's size before downloading it
                self._head_only = True
                try:
                    self.do_GET()
                finally:
                    self._head_only = False

            def _send(self, code, ctype, body):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not getattr(self, "_head_only", False):
                    self.wfile.write(body)

            def _file(self, name):
                for group in index.wheels.values():
                    for w in group:
                        if w.name == name:
                            body = w.read_bytes()
                            if w in index.wheels.get("tampered", [])[len(index.wheels.get("good", [])):]:
                                body = body[:-1] + bytes([body[-1] ^ 0xFF])  # the index's sha256 no longer matches
                            if w in index.wheels.get("stall", [])[len(index.wheels.get("good", [])):] and not getattr(self, "_head_only", False):
                                index.unstall.wait(index.stall_seconds)  # an install that takes long enough to interrupt
                            return self._send(200, "application/octet-stream", body)
                self._send(404, "text/plain", b"no such file")

            def _metadata(self, name):
                for group in index.wheels.values():
                    for w in group:
                        if w.name == name:
                            return self._send(200, "text/plain", wheel_metadata(w))
                self._send(404, "text/plain", b"no such file")

            def _project(self, mode, project, group=None):
                if mode == "garbage":
                    return self._send(200, "text/html", b"\x00\x9f\x92 definitely not a simple index }{")
                if mode == "slow":
                    time.sleep(index.slow_seconds)
                    mode = "json"
                named = group or (mode if mode in ("broken", "tampered", "stall", "pypi") else "good")
                group = index.wheels.get(named, [])
                files = [w for w in group if w.name.split("-")[0].lower() == project.replace("-", "_")]
                if not files:
                    return self._send(404, "text/plain", b"no such project")
                sha = file_sha256  # of the file as built (a tampered one is served otherwise)
                accept = self.headers.get("Accept", "")
                if mode in ("pypi", "whl"):  # PEP 658 metadata; sizes (PEP 700) in PyPI's JSON only
                    return self._modern(project, files, json_ok=mode == "pypi" and "application/vnd.pypi.simple.v1+json" in accept)
                if mode != "html" and "application/vnd.pypi.simple.v1+json" in accept:
                    body = {"meta": {"api-version": "1.0"}, "name": project,
                            "files": [_json_file(w, hashes={"sha256": sha(w)}) for w in files]}
                    return self._send(200, "application/vnd.pypi.simple.v1+json", json.dumps(body).encode())
                links = "\n".join(_link(w, f"sha256={sha(w)}") for w in files)
                page = f"<!DOCTYPE html>\n<html><body>\n<h1>Links for {project}</h1>\n{links}\n</body></html>\n"
                self._send(200, "text/html", page.encode())

            def _modern(self, project, files, json_ok):
                if json_ok:
                    body = {"meta": {"api-version": "1.1"}, "name": project, "versions": [],
                            "files": [_json_file(w, size=w.stat().st_size, hashes={"sha256": file_sha256(w)},
                                                 **{"core-metadata": {"sha256": hashlib.sha256(wheel_metadata(w)).hexdigest()}})
                                      for w in files]}
                    return self._send(200, "application/vnd.pypi.simple.v1+json", json.dumps(body).encode())
                links = "\n".join(_link(w, f"sha256={file_sha256(w)}",
                                         f' data-dist-info-metadata="sha256={hashlib.sha256(wheel_metadata(w)).hexdigest()}"')
                                   for w in files)
                page = f"<!DOCTYPE html>\n<html><body>\n<h1>Links for {project}</h1>\n{links}\n</body></html>\n"
                self._send(200, "text/html", page.encode())

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, mode: str = "json") -> str:
        return f"{self.base}/{mode}/simple"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def refused_url() -> str:
    """An index URL on a local port nothing listens on (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/simple"


def installed(venv: Path) -> dict[str, str]:
    """{name: version} of what a venv holds (pip, setuptools and wheel left out)."""
    import subprocess

    out = subprocess.run([str(venv / "bin/python"), "-I", "-c",
                          "import json; from importlib import metadata as m; "
                          "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"],
                         capture_output=True, text=True, check=True).stdout
    return {k: v for k, v in json.loads(out).items() if k not in ("pip", "setuptools", "wheel")}


def fake_cuda_torch(version: str, cuda: str, arch_list: list[str], capability: tuple[int, int],
                    gpu: str = "NVIDIA GeForce GTX 1080 Ti") -> str:
    """A fake CUDA build: it sees one GPU of `capability` and reports `arch_list` as the kernels it
    holds; a CUDA operation fails as a real build does when the GPU's architecture is missing."""
    return FAKE_TORCH.format(version=version, cuda=cuda) + f'''
_ARCHS = {arch_list!r}
_CAP = {capability!r}
class cuda:
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def device_count():
        return 1
    @staticmethod
    def get_arch_list():
        return list(_ARCHS)
    @staticmethod
    def get_device_capability(i=0):
        return _CAP
    @staticmethod
    def get_device_name(i=0):
        return {gpu!r}
def ones(n, device="cpu"):
    if device == "cuda" and "sm_%d%d" % _CAP not in _ARCHS and not any(a.startswith("sm_%d" % _CAP[0]) for a in _ARCHS):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
    return _T([[1.0] * n])
'''
