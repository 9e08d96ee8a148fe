"""What the README says `pip install -e .` and `pip install -e '.[torch]'` install, checked against plain
PyPI's metadata (the JSON API, https://pypi.org/pypi/NAME/json, and the wheels' own METADATA read with
HTTP range requests, as pip's lazy wheel does), never against this machine's pip configuration or
its wheel folder. Skipped, with the reason, where PyPI cannot be reached.

The README's words: `.[torch]` pins `torch==VERSION`, which on Linux is PyPI's CUDA build: a wheel of
about N MB that pulls in about M GB of NVIDIA libraries (cuDNN, cuBLAS, NCCL, ...), no `+cpu` build
being on PyPI; `pip install -e .` installs about a dozen small packages, no torch."""

from __future__ import annotations

import io
import json
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import ROOT

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PYPI = "https://pypi.org/pypi"
README = (ROOT / "README.md").read_text(encoding="utf-8")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# the machine the README's words are about: Linux x86_64, CPython 3.11 (CI's)
LINUX = {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux", "os_name": "posix",
         "python_version": "3.11", "python_full_version": "3.11.7", "implementation_name": "cpython",
         "platform_python_implementation": "CPython", "extra": ""}


def get(url: str, headers: dict | None = None) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
        return r.read()


def project(name: str) -> dict:
    return json.loads(get(f"{PYPI}/{canonicalize_name(name)}/json"))


@pytest.fixture(scope="module")
def torch_project() -> dict:
    try:
        return project("torch")
    except (urllib.error.URLError, OSError) as e:
        pytest.skip(f"PyPI's JSON API is not reachable (offline?): {e}")


class RemoteFile(io.RawIOBase):
    """A wheel on the index read by HTTP range requests: zipfile reads the central directory at the
    end and the one member it wants, a megabyte or so of a 500 MB wheel."""

    def __init__(self, url: str, size: int):
        self.url, self.size, self.pos = url, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.size - self.pos)
        if n <= 0:
            return 0
        data = get(self.url, {"Range": f"bytes={self.pos}-{self.pos + n - 1}"})[:n]
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


def requires_dist(name: str, file: dict) -> list[Requirement]:
    """The Requires-Dist of one wheel on PyPI, from the wheel's own METADATA."""
    url = urllib.parse.urljoin(f"{PYPI}/{canonicalize_name(name)}/json", file["url"])
    with zipfile.ZipFile(io.BufferedReader(RemoteFile(url, file["size"]), buffer_size=1 << 16)) as z:
        meta = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        lines = z.read(meta).decode().splitlines()
    return [Requirement(line.split(":", 1)[1].strip()) for line in lines if line.startswith("Requires-Dist:")]


def linux_wheel(releases: dict, version: str) -> dict | None:
    """The file pip takes on Linux x86_64 CPython 3.11 from one release, if it has one."""
    files = [f for f in releases.get(version, []) if f["filename"].endswith(".whl") and not f.get("yanked")]
    for wanted in (r"-cp311-cp311-manylinux[^-]*x86_64\.whl$", r"-(py3|cp311-abi3|py2\.py3)-[^-]+-manylinux[^-]*x86_64\.whl$",
                   r"-(py3|py2\.py3)-none-any\.whl$"):
        match = [f for f in files if re.search(wanted, f["filename"])]
        if match:
            return match[0]
    return None


def newest(name: str, req: Requirement) -> tuple[dict, str, dict]:
    """(project, version, Linux wheel) of the newest release of name that req allows."""
    data = project(name)
    for version in sorted((Version(v) for v in data["releases"] if req.specifier.contains(v)), reverse=True):
        wheel = linux_wheel(data["releases"], str(version))
        if wheel:
            return data, str(version), wheel
    raise AssertionError(f"no Linux x86_64 wheel of {req} on PyPI")


def figure(pattern: str) -> float:
    m = re.search(pattern, " ".join(README.split()))
    assert m, f"the README no longer says {pattern!r}"
    return float(m.group(1))


def test_the_torch_extra_is_the_pin_the_readme_names():
    assert PROJECT["optional-dependencies"]["torch"] == [re.search(r"`(torch==[\d.]+)`", README).group(1)]


def test_pip_install_dot_installs_a_dozen_small_packages_and_no_torch(torch_project):
    """`pip install -e .`: envkit's own dependencies and what they pull in (each project's newest
    release on PyPI), none of them torch."""
    sizes: dict[str, int] = {}
    todo = [Requirement(r) for r in PROJECT["dependencies"]]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in sizes or (req.marker is not None and not req.marker.evaluate(LINUX)):
            continue
        data, _, wheel = newest(name, req)
        sizes[name] = wheel["size"]
        todo += [Requirement(d) for d in data["info"]["requires_dist"] or []]
    assert "torch" not in sizes
    words = " ".join(README.split())
    assert "`pip install -e .` installs envkit and about a dozen small packages" in words and "no torch" in words
    assert 9 <= len(sizes) <= 15, sorted(sizes)
    assert 0.5 <= sum(sizes.values()) / 1e6 / figure(r"about ([\d.]+) MB of wheels") <= 2, sizes


def test_the_torch_extra_on_linux_is_pypis_cuda_build_of_the_size_the_readme_says(torch_project):
    pin = Requirement(PROJECT["optional-dependencies"]["torch"][0])
    version = str(next(iter(pin.specifier)).version)
    wheel = linux_wheel(torch_project["releases"], version)
    assert wheel is not None
    # a CUDA build: on Linux it requires NVIDIA's libraries (cuDNN, NCCL) and the CUDA toolkit
    cuda = [r for r in requires_dist("torch", wheel) if r.marker is not None and r.marker.evaluate(LINUX)]
    names = {canonicalize_name(r.name) for r in cuda}
    assert [n for n in names if n.startswith("nvidia-cudnn-cu")] != [], names
    assert [n for n in names if n.startswith("nvidia-nccl-cu")] != [], names
    # what pip downloads for them: each requirement's newest allowed Linux wheel, one level of extras
    sizes: dict[str, int] = {}
    todo = list(cuda)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in sizes:
            continue
        _, _, file = newest(name, req)
        sizes[name] = file["size"]
        if req.extras:
            todo += [r for r in requires_dist(name, file) if r.marker is not None
                     and any(r.marker.evaluate({**LINUX, "extra": e}) for e in req.extras)]
    libraries = sum(size for name, size in sizes.items() if name != "triton")
    # the README's figures, within a quarter (the libraries' newest allowed versions move)
    assert abs(wheel["size"] / 1e6 - figure(r"a ([\d,]+) MB wheel")) <= 0.25 * wheel["size"] / 1e6
    assert abs(libraries / 1e9 - figure(r"about ([\d.]+) GB of NVIDIA")) <= 0.25 * libraries / 1e9


def test_no_cpu_build_of_torch_is_on_pypi(torch_project):
    """The README sends you to `envkit setup` for the CPU build: PyPI holds no `+cpu` version (it takes
    no local versions), so pip cannot pick it from there."""
    versions = list(torch_project["releases"])
    assert len(versions) >= 20
    assert [v for v in versions if "+" in v] == []
    assert "PyPI has no CPU build: `envkit setup` is the way to the CPU build" in " ".join(README.split())
