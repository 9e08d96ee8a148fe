"""The real torch 2.13.0 CPU wheel (with its real dependencies, fetched once by pip through its own
configuration, skipped where it cannot) served as a PyTorch-style and a PyPI-style index on
127.0.0.1: `envkit lock` (target this), `envkit setup --lock pylock.toml` installs and verifies it
(torch imports and computes), and one flipped byte in a wheel stops a second install, naming the
file, before anything is created."""

from __future__ import annotations

import subprocess
import sys

import pytest

from localindex import LocalIndex, installed
from test_pylock import run

pytest.importorskip("packaging.pylock")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_wheels(tmp_path_factory):
    d = tmp_path_factory.mktemp("real-wheels")
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(d),
                        "torch==2.13.0+cpu", "numpy"], capture_output=True, text=True, timeout=600)
    torch = list(d.glob("torch-2.13.0+cpu-*.whl"))
    if r.returncode != 0 or not torch:
        pytest.skip("the real torch 2.13.0+cpu wheel is not reachable through pip's configuration here")
    return {"cpu": torch, "pypi": [p for p in d.glob("*.whl") if p not in torch]}


def test_real_torch_from_the_lock_and_a_tampered_wheel(real_wheels, venv, tmp_path):
    with LocalIndex(real_wheels) as srv:
        env = {"ENVKIT_PYTORCH_INDEX": f"{srv.base}/whl", "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
               "ENVKIT_CACHE_DIR": str(tmp_path / "cache")}
        r = run("lock", "--torch", "2.13.0", "--index-url", f"{srv.base}/pypi/simple", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "linux-x86_64-cpu" in r.stdout and "torch 2.13.0+cpu" in r.stdout
        text = (tmp_path / "pylock.toml").read_text()
        assert "PEP 658 metadata" in text and 'name = "sympy"' in text and 'name = "networkx"' in text

        r = run("setup", "--lock", "pylock.toml", "--yes", "--no-selftest", "--venv", str(venv), cwd=tmp_path, env=env,
                timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "verifying in" in r.stderr
        got = installed(venv)
        assert got["torch"] == "2.13.0+cpu" and {"sympy", "networkx", "jinja2", "filelock", "numpy"} <= set(got)
        assert subprocess.run([str(venv / "bin/python"), "-c", "import torch; print(torch.ones(2).sum())"],
                              capture_output=True).returncode == 0

        victim = next(p for p in real_wheels["pypi"] if p.name.startswith("filelock-"))
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        second = tmp_path / "second"
        env["ENVKIT_CACHE_DIR"] = str(tmp_path / "cache2")
        r = run("setup", "--lock", "pylock.toml", "--yes", "--no-selftest", "--venv", str(second), cwd=tmp_path, env=env,
                timeout=600)
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"the wheel {victim.name} downloaded from" in r.stderr and "nothing was installed" in r.stderr
        assert not second.exists()
