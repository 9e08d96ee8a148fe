"""Proven after install on an AMD GPU: a ROCm build whose arch list lacks this GPU's gfx target is
rolled back. This machine has no AMD GPU: a recorded `amd-smi static` answer on PATH (the MI350X
layout of ROCm/rocm-systems#2987, here an RX 7900 XTX) is read by envkit's live facts runner like
the real command, and the fake ROCm torch reports the GPU and the kernels it holds."""

from __future__ import annotations

import os

import pytest

from conftest import envkit
from localindex import FAKE_TORCH, LocalIndex, build_wheel, installed

AMD_SMI = """GPU: 0
    ASIC:
        MARKET_NAME: Radeon RX 7900 XTX
        VENDOR_ID: 0x1002
        DEVICE_ID: 0x744c
        TARGET_GRAPHICS_VERSION: gfx1100
    DRIVER:
        NAME: amdgpu
        VERSION: 6.12.12
"""


def fake_rocm_torch(version: str, arch_list: list[str], gfx: str = "gfx1100") -> str:
    """A fake ROCm build: torch.version.hip set, one GPU whose gcnArchName is `gfx`, `arch_list` as
    its kernels; a GPU operation fails as a real build does when the target is missing."""
    return FAKE_TORCH.format(version=version, cuda=None) + f'''
version.hip = "7.2.26015"
_ARCHS = {arch_list!r}
class _Props:
    name = "Radeon RX 7900 XTX"
    gcnArchName = "{gfx}"
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
        return (11, 0)
    @staticmethod
    def get_device_name(i=0):
        return _Props.name
    @staticmethod
    def get_device_properties(i=0):
        return _Props()
def ones(n, device="cpu"):
    if device == "cuda" and "{gfx}" not in _ARCHS:
        raise RuntimeError("HIP error: invalid device function")
    return _T([[1.0] * n])
'''


@pytest.fixture
def fake_amd_gpu(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "amd-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n" + AMD_SMI + "EOF\n")
    smi.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "ENVKIT_CACHE_DIR": str(tmp_path / "cache")}


def test_a_rocm_build_without_the_gpus_target_is_rolled_back(tmp_path, venv, fake_amd_gpu):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    good = build_wheel(wheels, "torch", "2.13.0+rocm7.2", module=fake_rocm_torch("2.13.0+rocm7.2", ["gfx942", "gfx950", "gfx1100", "gfx1201"]))
    bad = build_wheel(wheels, "torch", "2.13.1+rocm7.2", module=fake_rocm_torch("2.13.1+rocm7.2", ["gfx942", "gfx950"]))
    with LocalIndex({"good": [good, bad]}) as srv:
        def setup(torch, *extra):
            return envkit("setup", "--yes", "--no-selftest", "--installer", "pip", "--no-numpy", "--venv", str(venv),
                          "--index-url", srv.url("json"), "--torch", torch, *extra, cwd=tmp_path, env=fake_amd_gpu, timeout=240)

        plan = setup("2.13.0", "--dry-run", "--json")
        assert plan.returncode == 0, plan.stderr
        assert '"backend": "rocm7.2"' in plan.stdout and '"profile": "rocm"' in plan.stdout  # amd-smi seen live
        r = setup("2.13.0")
        assert r.returncode == 0, r.stdout + r.stderr
        assert installed(venv) == {"torch": "2.13.0+rocm7.2"}
        r = setup("2.13.1")
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()[-1]
    assert "Radeon RX 7900 XTX (gfx1100) is not in this ROCm build's torch.cuda.get_arch_list()" in err
    assert "put back exactly" in err
    assert installed(venv) == {"torch": "2.13.0+rocm7.2"}
