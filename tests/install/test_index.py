"""The resolver against a real index on 127.0.0.1 (tests/localindex.py): PEP 691 JSON and PEP 503
HTML, channel and specifier selection, tag filtering, and an index that is down, garbage or slow."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from envkit.errors import EnvkitError
from envkit.install.index import pages, pip_config
from envkit.install.act import interp
from envkit.install.choice import resolve
from envkit.install.choice.model import Choice, parse_request
from localindex import LocalIndex, build_all, refused_url


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    wheels = build_all(tmp_path_factory.mktemp("wheels"))
    with LocalIndex(wheels, slow_seconds=3.0) as srv:
        yield srv


@pytest.fixture(scope="module")
def target():
    return interp.probe(sys.executable, dists=False)


def cpu_choice(url: str, channel: str = "stable") -> Choice:
    return Choice(device="cpu", backend="cpu", channel=channel, index_url=url, index_why="test", local="cpu")


def pick(server, target, text, mode="json"):
    req = parse_request(text)
    choice = cpu_choice(server.url(mode), req.channel)
    return resolve.resolve(choice, req, frozenset(target.tags), target.version, ["torchvision"] if text in ("stable", "2.5.1") else [],
                           explicit_index=True, pip_python=sys.executable)


@pytest.mark.parametrize("mode", ["json", "html"])
def test_reads_json_and_html_the_same(server, mode):
    cands = pages.fetch(server.url(mode), "torch")
    assert {str(c.version) for c in cands} >= {"2.5.1+cpu", "2.6.0+cpu", "2.7.0rc1+cpu", "2.8.0.dev20250101+cpu", "2.9.0+cu128"}
    assert all(c.sha256 and len(c.sha256) == 64 for c in cands)
    assert all(c.url.startswith(server.base + "/files/") for c in cands)
    accept = [a for p, a in server.requests if p.startswith(f"/{mode}/simple/torch")]
    assert accept and "application/vnd.pypi.simple.v1+json" in accept[-1]


@pytest.mark.parametrize("mode", ["json", "html", "folder"])
def test_one_version_asked_for_is_that_versions_files_of_the_whole_page(server, mode):
    """A run's record asks the index for one version of each package: the page's files of that
    version, as the whole page gives them, whatever the spelling of the version (2.6.0+CPU is 2.6.0+cpu)."""
    from packaging.version import Version

    index = str(Path(server.wheels["good"][0]).parent) if mode == "folder" else server.url(mode)
    whole = pages.fetch(index, "torch")
    assert len({c.version for c in whole}) >= 6  # every version of the page, not only the first file's
    for text in ("2.6.0+CPU", "2.8.0.dev20250101+cpu", "2.9.0+cpu"):
        want = Version(text)
        one = pages.fetch(index, "torch", version=want)
        assert one and [(c.filename, c.sha256, c.url) for c in one] == [(c.filename, c.sha256, c.url) for c in whole if c.version == want]
    assert pages.fetch(index, "torch", version=Version("3.0")) == []


@pytest.mark.parametrize("text,expected,companions", [
    # stable: not 2.9.0+cu128 (CUDA), 2.9.0 (macOS) or 2.9.1 (cp27); torchvision paired with 2.6, not the macOS 0.22
    ("stable", "2.6.0+cpu", {"torchvision": "0.21.0+cpu"}),
    ("nightly", "2.8.0.dev20250101+cpu", {}),
    ("test", "2.7.0rc1+cpu", {}),
    ("2.5.1", "2.5.1+cpu", {"torchvision": "0.20.1+cpu"}),
    ("2.5", "2.5.1+cpu", {}),
    (">=2.5,<2.6", "2.5.1+cpu", {}),
    ("<=2.8.0.dev20241231", "2.8.0.dev20241215+cpu", {}),
])
def test_selects(server, target, text, expected, companions):
    res = pick(server, target, text, mode="html" if text == "test" else "json")  # torchvision asked for with stable and 2.5.1
    assert str(res.torch.version) == expected
    assert {name: str(c.version) for name, c in res.companions.items()} == companions


def test_nothing_matches_says_what_is_there(server, target):
    with pytest.raises(EnvkitError) as exc:
        pick(server, target, "==2.9.0")
    msg = exc.value.one_line()
    assert f"torch ==2.9.0 (a +cpu build) is on none of: {server.url('json')}; they have 2.5.1+cpu, 2.6.0+cpu (fix:" in msg


def test_bad_specifier():
    with pytest.raises(EnvkitError) as exc:
        parse_request(">>2")
    assert "is not a version, a specifier or a channel" in exc.value.one_line()


def test_index_down_is_one_clear_error_quickly(target):
    url = refused_url()
    t0 = time.monotonic()
    with pytest.raises(EnvkitError) as exc:
        resolve.resolve(cpu_choice(url), parse_request("stable"), frozenset(target.tags), target.version, [],
                        explicit_index=True, pip_python=sys.executable)
    assert time.monotonic() - t0 < 5
    msg = exc.value.one_line()
    assert f"cannot reach the package index {url}" in msg and "refused" in msg and "--index-url" in msg


def test_garbage_answer(server, target):
    with pytest.raises(EnvkitError) as exc:
        pages.fetch(server.url("garbage"), "torch")
    assert "not a package index page" in exc.value.one_line()


def test_slow_index_times_out(server, monkeypatch):
    monkeypatch.setenv("ENVKIT_INDEX_TIMEOUT", "0.3")
    t0 = time.monotonic()
    with pytest.raises(EnvkitError) as exc:
        pages.fetch(server.url("slow"), "torch")
    assert time.monotonic() - t0 < 4
    assert "did not answer within 0.3 s" in exc.value.one_line()


def test_unreachable_default_index_falls_back_to_pip_sources_with_cpu_rule(server, target, monkeypatch):
    """Offline from download.pytorch.org: stable falls back to pip's configured sources, +cpu only."""
    monkeypatch.setattr(pip_config, "pip_sources", lambda python: ([server.url("json")], []))
    res = resolve.resolve(cpu_choice(refused_url()), parse_request("stable"), frozenset(target.tags), target.version, [],
                          explicit_index=False, pip_python=sys.executable)
    assert str(res.torch.version) == "2.6.0+cpu" and res.index_url is None
    assert "unreachable" in res.notes[0]
    with pytest.raises(EnvkitError):  # nightly never falls back
        resolve.resolve(cpu_choice(refused_url(), "nightly"), parse_request("nightly"), frozenset(target.tags),
                        target.version, [], explicit_index=False, pip_python=sys.executable)


@pytest.mark.skipif(sys.platform != "linux", reason="compared with packaging on Linux (glibc) only: this call passes no macOS "
                    "version, so on a Mac the fallback would answer for macOS 11.0, not this machine")
def test_computed_tags_match_packaging_for_this_interpreter(target):
    """The stdlib-only fallback (a venv without pip or packaging) agrees with packaging.tags."""
    import platform

    from packaging import tags

    glibc = platform.libc_ver()[1] or None
    computed = interp.computed_tags(target.version, "cpython", platform.system(), platform.machine(), glibc=glibc)
    real = [str(t) for t in tags.sys_tags()]
    assert set(real[:50]) <= set(computed)
