"""The build a machine gets is one that exists, runs on its driver and holds kernels for its GPU
(envkit/data/torch_variants.toml): plans for recorded machines, the verification after install
that rolls back a build without the GPU's architecture, and doctor's judgement of one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import envkit, snapshot_path
from localindex import LocalIndex, build_wheel, fake_cuda_torch, installed


def plan(tmp_path, snapshot, *args):
    r = envkit("setup", "--replay", str(snapshot_path(snapshot)), "--json", *args, cwd=tmp_path, timeout=60)
    return r, (json.loads(r.stdout) if r.returncode == 0 else None)


@pytest.mark.parametrize("snapshot,torch,backend", [
    # Pascal (sm_61): cu128 since 2.8 and every CUDA 13 build hold no sm_50-sm_61 kernels; cu126 does
    ("linux_gtx1080ti_cu128", "2.13", "cu126"),
    ("linux_gtx1080ti_cu128", "2.11", "cu126"),
    ("linux_gtx1080ti_cu128", "2.10", "cu126"),
    ("linux_gtx1080ti_cu128", "stable", "cu126"),
    # driver 570 (CUDA 12.8): 2.12+ ship cu126, cu130, cu132 only, and CUDA 13 needs 580
    ("linux_h100_driver570", "2.13", "cu126"),
    ("linux_h100_driver570", "2.11", "cu128"),
    # machines recorded before this table: two H100 on 550; an RTX 5090 (sm_120) on 570
    ("linux_h100", "2.11", "cu128"),
    ("linux_h100", "stable", "cu126"),
    ("linux_rtx5090_cu126", "2.11", "cu128"),
    ("linux_rtx5090_cu126", "2.7", "cu128"),
])
def test_plans_the_newest_build_that_exists_and_runs(tmp_path, snapshot, torch, backend):
    r, p = plan(tmp_path, snapshot, "--torch", torch)
    assert r.returncode == 0, r.stderr
    assert p["backend"] == backend and p["index_url"] == f"https://download.pytorch.org/whl/{backend}", p


@pytest.mark.parametrize("snapshot,torch,needles", [
    ("linux_h100_driver570", "nightly", ["the newest nightly builds need driver 580", "570.86.15", "--torch stable"]),
    ("linux_h100", "nightly", ["nightly builds need driver 580", "550.54.15"]),
    # sm_120 on driver 570: 2.13's cu126 has no Blackwell kernels and its CUDA 13 builds need 580
    ("linux_rtx5090_cu126", "2.13", ["builds of torch 2.13 with kernels for sm_120 (cu130, cu132) need driver 580", "--torch 2.11"]),
    # Pascal asking for a release whose every build dropped it (2.6 has cu118/cu124/cu126 with sm_60: fits; none here)
    ("linux_rtx5090_cu126", "2.6", ["hold no kernels for NVIDIA GeForce RTX 5090 (sm_120)", "--torch 2.11"]),
])
def test_no_build_fits_one_line_exit_1_nothing_written(tmp_path, snapshot, torch, needles):
    r, _ = plan(tmp_path, snapshot, "--torch", torch)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)
    assert list(tmp_path.iterdir()) == []


def test_doctor_fails_pascal_under_a_cu128_build(tmp_path):
    r = envkit("doctor", "--replay", str(snapshot_path("linux_gtx1080ti_cu128")), "--json", cwd=tmp_path)
    assert r.returncode == 1
    cuda = next(c for c in json.loads(r.stdout)["checks"] if c["id"] == "cuda")
    assert cuda["status"] == "fail" and "sm_61" in cuda["message"] and "get_arch_list" in cuda["message"]
    assert "cu126" in cuda["fix"]


@pytest.fixture
def fake_gpu(tmp_path):
    """This machine (no GPU) seen as a GTX 1080 Ti on driver 580: a recorded nvidia-smi answer on PATH,
    read by envkit's live facts runner like the real command."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA GeForce GTX 1080 Ti, 11264, 580.95.05, 6.1'\n")
    smi.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "ENVKIT_CACHE_DIR": str(tmp_path / "cache")}


def test_a_build_without_the_gpus_architecture_is_rolled_back(tmp_path, venv, fake_gpu):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    pascal_ok = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    no_pascal = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
    good = build_wheel(wheels, "torch", "2.13.0+cu126", module=fake_cuda_torch("2.13.0+cu126", "12.6", pascal_ok, (6, 1)))
    # a cu126 build that, unlike PyTorch's (torch_variants.toml), holds no Pascal kernels: a mirror's own build
    bad = build_wheel(wheels, "torch", "2.14.0+cu126", module=fake_cuda_torch("2.14.0+cu126", "12.6", no_pascal, (6, 1)))
    other = build_wheel(wheels, "torch", "2.14.0+cu132", module=fake_cuda_torch("2.14.0+cu132", "13.2", no_pascal, (6, 1)))
    with LocalIndex({"good": [good, bad, other]}) as srv:
        def setup(torch):
            return envkit("setup", "--yes", "--no-selftest", "--installer", "pip", "--no-numpy", "--venv", str(venv),
                          "--index-url", srv.url("json"), "--torch", torch, cwd=tmp_path, env=fake_gpu, timeout=240)

        r = setup("2.13")
        assert r.returncode == 0, r.stdout + r.stderr
        assert installed(venv) == {"torch": "2.13.0+cu126"}
        r = setup("2.14")
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()[-1]
    assert "torch==2.14.0+cu126" in r.stderr  # the cu126 wheel, never the +cu132 one beside it
    assert "NVIDIA GeForce GTX 1080 Ti (sm_61) is not in this build's torch.cuda.get_arch_list()" in err
    assert "put back exactly" in err
    assert installed(venv) == {"torch": "2.13.0+cu126"}
    assert subprocess.run([str(venv / "bin/python"), "-c", "import torch; assert torch.__version__ == '2.13.0+cu126'"]).returncode == 0


def test_torchaudio_pairs_its_last_release_and_steers_the_build(tmp_path):
    """torchaudio 2.11 is its last release and pairs with every later torch (stable ABI), but it was
    built for 2.11's CUDA builds only: with --with torchaudio a driver-580 H100 gets cu130, not cu132."""
    r, p = plan(tmp_path, "real_h100", "--torch", "2.13")
    assert r.returncode == 0 and p["backend"] == "cu132", r.stderr
    r, p = plan(tmp_path, "real_h100", "--torch", "2.13", "--with", "torchaudio")
    assert r.returncode == 0 and p["backend"] == "cu130", r.stderr
    assert any("cu132: torchaudio 2.11, its last release, has no cu132 build" in n for n in p["notes"])
    r, p = plan(tmp_path, "linux_h100_driver570", "--torch", "2.13", "--with", "torchaudio")
    assert r.returncode == 0 and p["backend"] == "cu126", r.stderr


def test_python_floor_depends_on_the_torch_release(tmp_path):
    r, _ = plan(tmp_path, "linux_t4_py39", "--torch", "2.13")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "torch 2.13 has wheels for Python 3.10 and newer only; this Python is 3.9.18" in r.stderr and "--python" in r.stderr
    r, p = plan(tmp_path, "linux_t4_py39", "--torch", "2.8")
    assert r.returncode == 0 and p["backend"] == "cu129" and p["limit"] is None
    r, p = plan(tmp_path, "linux_t4_py39")  # stable: the newest release Python 3.9 has, with 2.8's newest build
    assert r.returncode == 0 and p["limit"] == "<2.9" and p["backend"] == "cu129", p
    checks = {c["id"]: c for c in json.loads(envkit("doctor", "--replay", str(snapshot_path("linux_t4_py39")), "--json",
                                                    cwd=tmp_path).stdout)["checks"]}
    assert checks["python-version"]["status"] == "warn" and "torch 2.14 needs Python 3.10+" in checks["python-version"]["message"]
    assert checks["cuda"]["status"] == "pass"  # sm_75 is in its cu126 arch list


def test_the_index_pages_overrule_the_table_where_the_network_allows(tmp_path, venv):
    """Live (not replayed): the chosen build's page on PyTorch's index (ENVKIT_PYTORCH_INDEX, laid out
    like download.pytorch.org/whl) is read; a build the table lists but whose page lacks the release
    is skipped for the next one that runs here."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100 PCIe, 81559, 570.86.15, 9.0'\n")
    (bindir / "nvidia-smi").chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    groups = {"cu128": [build_wheel(wheels, "torch", "2.10.0+cu128")],  # 2.11 withdrawn from cu128
              "cu126": [build_wheel(wheels, "torch", "2.11.0+cu126"), build_wheel(wheels, "torch", "2.10.0+cu126")]}
    with LocalIndex(groups) as srv:
        env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "ENVKIT_PYTORCH_INDEX": f"{srv.base}/whl/"}
        r = envkit("setup", "--dry-run", "--json", "--installer", "pip", "--no-numpy", "--venv", str(venv), "--torch", "2.11",
                   cwd=tmp_path, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        p = json.loads(r.stdout)
        assert p["backend"] == "cu126" and p["versions"] == {"torch": "2.11.0+cu126"}, p
        assert p["index_url"] == f"{srv.base}/whl/cu126"
        assert any("cu128" in n and "holds no torch 2.11" in n for n in p["notes"]), p["notes"]
        assert ("/whl/cu128/torch/", "") in [(path, "") for path, _ in srv.requests]
        r = envkit("setup", "--dry-run", "--json", "--installer", "pip", "--no-numpy", "--venv", str(venv), "--torch", "2.12",
                   cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 2 and "holds torch 2.12" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_regen_script_reads_the_index_and_names_what_the_table_lacks(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    groups = {
        "cu126": [build_wheel(wheels, "torch", f"{v}+cu126") for v in ("2.11.0", "2.13.0")],
        "cu130": [build_wheel(wheels, "torch", f"{v}+cu130") for v in ("2.11.0", "2.13.0", "2.15.0")],
        "cu132": [build_wheel(wheels, "torch", "2.13.0+cu132")],
        "nightly/cu130": [build_wheel(wheels, "torch", "2.16.0.dev20261120+cu130")],
        "nightly/cu128": [build_wheel(wheels, "torch", "2.12.0.dev20260301+cu128")],  # left behind: dropped
    }
    script = [sys.executable, "benchmarks/regen_build_table.py"]
    root = str(snapshot_path("x").parents[2])
    with LocalIndex(groups) as srv:
        r = subprocess.run(script + ["--base", f"{srv.base}/whl", "--check"], capture_output=True, text=True, cwd=root, timeout=120)
        rows = subprocess.run(script + ["--base", f"{srv.base}/whl"], capture_output=True, text=True, cwd=root, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "torch 2.11: index has cu126, cu130; table has cu126, cu128, cu130" in r.stdout
    assert "torch 2.15: on the index (cu130), not in the table" in r.stdout
    assert "nightly: index has cu130; table has cu130, cu132" in r.stdout
    assert "torch 2.13" not in r.stdout  # the same builds as the table
    assert rows.returncode == 0 and '[[release]]\ntorch = "2.15"\ncuda = { cu130 = "turing_to_blackwell_ptx" }' in rows.stdout


def test_build_table_api_answers_which_builds_exist():
    """envkit.checks.builds.available(): the table other modules (locks, plans) read, not re-parse."""
    from envkit.checks import builds

    got = builds.available("2.13.0")
    assert [b["backend"] for b in got] == ["cu126", "cu130", "cu132"]
    assert got[0]["min_driver"] == "525.60.13" and got[1]["min_driver"] == "580.65.06"
    assert "6.0" in got[0]["sm"] and "6.0" not in got[1]["sm"] and got[1]["ptx"] == "12.0"
    assert [b["backend"] for b in builds.available("2.11")] == ["cu126", "cu128", "cu130"]
    assert "7.0" not in builds.available("2.11")[1]["sm"] and "7.0" in builds.available("2.10")[1]["sm"]  # #172352
    assert [b["backend"] for b in builds.available(None, "nightly")] == ["cu130", "cu132"]
    assert builds.available("2.99")[0]["assumed"] is True
