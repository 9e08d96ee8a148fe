"""Every accelerator is a fact. Replayed from published outputs of a 4 x AMD Instinct MI300X node
(rocminfo) and of Intel Data Center GPU Max 1550 nodes (xpu-smi discovery on Aurora, sycl-ls),
`envkit doctor --json` lists each GPU in facts.gpus (vendor, name, architecture, memory) with their
count, and the device verdicts (bf16, compile, the device that trains) speak of that GPU, not of the
CPU. Where the outputs come from: tests/snapshots/build_accel_snapshots.py and each snapshot's
"sources" key. Expected values are read from those outputs or from other published figures."""

from __future__ import annotations

import json
import re

import pytest

from conftest import envkit, load_snapshot, snapshot_path

# `rocm-smi --showmeminfo vram` of an MI300X: "VRAM Total Memory (B): 206141652992" (ROCm/ROCm#4750)
MI300X_VRAM = 206141652992
MAX1550 = "Intel(R) Data Center GPU Max 1550"


def doctor(tmp_path, name: str, *args: str, **changes):
    """`envkit doctor --replay` of a snapshot, with some of its sections replaced; (stdout, rc)."""
    path = snapshot_path(name)
    if changes:
        snap = load_snapshot(name)
        snap.update(changes)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(snap))
    r = envkit("doctor", "--replay", str(path), *args)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout, r.returncode


def doctor_json(tmp_path, name: str, **changes) -> dict:
    out, rc = doctor(tmp_path, name, "--json", **changes)
    data = json.loads(out)
    data["by_id"] = {c["id"]: c for c in data["checks"]}
    return data


def gpu_rows(data: dict) -> list[tuple]:
    return [(g["vendor"], g["name"], g["arch"], g["memory_bytes"]) for g in data["facts"]["gpus"]]


# --------------------------------------------------------------------------- 4 x MI300X


def test_mi300x_node_lists_its_four_gpus_as_facts(tmp_path):
    rocminfo = load_snapshot("linux_rocm_mi300x_x4")["commands"]["rocminfo"]
    agents = re.findall(r"^  Marketing Name:\s+AMD Instinct MI300X\s*$", rocminfo, re.M)
    assert len(agents) == 4  # the output's own GPU agents (the two EPYC agents are no GPUs)
    data = doctor_json(tmp_path, "linux_rocm_mi300x_x4")
    assert gpu_rows(data) == [("amd", "AMD Instinct MI300X", "gfx942", MI300X_VRAM)] * len(agents)
    assert data["facts"]["gpu_count"] == 4


def test_mi300x_verdicts_speak_of_the_gpu(tmp_path):
    data = doctor_json(tmp_path, "linux_rocm_mi300x_x4")
    c = data["by_id"]
    assert (data["device"], data["profile"]) == ("cuda", "rocm")  # ROCm torch trains through torch.cuda
    assert c["rocm-xpu"]["status"] == "pass" and "4 x AMD Instinct MI300X (gfx942)" in c["rocm-xpu"]["message"]
    assert c["bf16"]["status"] == "pass" and "bf16 supported on 4 x AMD Instinct MI300X (gfx942)" in c["bf16"]["message"]
    assert c["compile"]["status"] == "pass"
    assert "torch.compile available on 4 x AMD Instinct MI300X (gfx942), ROCm" in c["compile"]["message"]
    assert c["cuda"]["status"] == "skip" and "AMD GPU under ROCm" in c["cuda"]["message"]
    out, rc = doctor(tmp_path, "linux_rocm_mi300x_x4")
    assert rc == 0 and "+ 4 x AMD Instinct MI300X 192 GiB (gfx942)" in out.splitlines()[0]


def test_rocm_torch_devices_are_amd_gpus_not_nvidia_ones(tmp_path):
    """Where ROCm torch ran, torch.cuda lists the MI300X (capability 9.4): with rocminfo missing it
    fills the facts, as AMD GPUs; it is no Hopper NVIDIA GPU (the cuda-hopper profile)."""
    snap = load_snapshot("linux_rocm_mi300x_x4")
    runtime = {"ok": True, "torch_version": "2.9.1+rocm6.4", "hip_version": "6.4.43482", "cuda_built": True,
               "cuda_available": True, "device_count": 4, "cuda_bf16": True, "arch_list": ["gfx942"],
               "devices": [{"name": "AMD Instinct MI300X", "capability": "9.4", "memory_bytes": MI300X_VRAM,
                            "gcn_arch": "gfx942:sramecc+:xnack-"}] * 4}
    commands = {k: v for k, v in snap["commands"].items() if k != "rocminfo"}
    data = doctor_json(tmp_path, "linux_rocm_mi300x_x4", runtime=runtime, commands=commands)
    assert gpu_rows(data) == [("amd", "AMD Instinct MI300X", "gfx942", MI300X_VRAM)] * 4
    assert data["profile"] == "rocm" and data["by_id"]["cuda"]["status"] == "skip"
    assert "4 x AMD Instinct MI300X (gfx942)" in data["by_id"]["bf16"]["message"]


# --------------------------------------------------------------------------- Intel Data Center GPU Max 1550


def test_aurora_node_lists_its_six_max_1550_as_facts_and_judges_them(tmp_path):
    table = load_snapshot("linux_xpu_max1550_aurora")["commands"]["xpu-smi discovery"]
    rows = table.count(f"Device Name: {MAX1550}")
    assert rows == 6
    data = doctor_json(tmp_path, "linux_xpu_max1550_aurora")
    # Ponte Vecchio ("pvc", the XPU wheels' name for it); the summary table prints no memory size
    assert gpu_rows(data) == [("intel", MAX1550, "pvc", None)] * rows
    assert data["facts"]["gpu_count"] == rows
    c = data["by_id"]
    assert (data["device"], data["profile"]) == ("xpu", "xpu")
    assert c["rocm-xpu"]["status"] == "pass" and MAX1550 in c["rocm-xpu"]["message"]
    assert c["bf16"]["status"] == "pass" and f"bf16 supported on 6 x {MAX1550} (pvc): bf16 XMX engines (XPU)" in c["bf16"]["message"]
    assert c["compile"]["status"] == "pass" and f"torch.compile available on 6 x {MAX1550} (pvc), XPU" in c["compile"]["message"]


def test_sycl_ls_names_the_max_1550_without_its_version(tmp_path):
    text = load_snapshot("linux_xpu_max1550_sycl_ls")["commands"]["sycl-ls"]
    level_zero = [line for line in text.splitlines() if line.startswith("[level_zero:gpu]")]
    assert len(level_zero) == 2  # the OpenCL lines are the same cards through another backend
    data = doctor_json(tmp_path, "linux_xpu_max1550_sycl_ls")
    assert gpu_rows(data) == [("intel", MAX1550, "pvc", None)] * len(level_zero)
    assert [g["driver"] for g in data["facts"]["gpus"]] == ["1.3.29735"] * 2  # the bracket that ends each line
    assert f"bf16 supported on 2 x {MAX1550} (pvc)" in data["by_id"]["bf16"]["message"]


@pytest.mark.parametrize("name,torch,build", [("linux_rocm_mi300x_x4", "2.9.1+cpu", "not a ROCm build"),
                                              ("linux_xpu_max1550_aurora", "2.9.1+cpu", "not the XPU build")])
def test_a_cpu_torch_on_a_gpu_node_is_judged_against_the_gpu(tmp_path, name, torch, build):
    data = doctor_json(tmp_path, name, packages={"torch": torch, "numpy": "2.2.6"})
    c = data["by_id"]
    assert c["rocm-xpu"]["status"] == "fail"
    for check_id in ("bf16", "compile"):
        assert c[check_id]["status"] == "skip" and build in c[check_id]["message"] and "sits unused" in c[check_id]["message"]


# --------------------------------------------------------------------------- NVIDIA


def test_nvidia_gpus_carry_vendor_and_architecture(tmp_path):
    smi = load_snapshot("linux_h100")["commands"]
    rows = next(v for k, v in smi.items() if k.startswith("nvidia-smi")).strip().splitlines()
    assert [r.split(", ")[-1] for r in rows] == ["9.0", "9.0"]  # compute capability 9.0: sm_90
    data = doctor_json(tmp_path, "linux_h100")
    assert [(g["vendor"], g["name"], g["arch"]) for g in data["facts"]["gpus"]] == [("nvidia", "NVIDIA H100 80GB HBM3", "sm_90")] * 2
    assert data["facts"]["gpu_count"] == 2 and data["device"] == "cuda"
    assert "2 x NVIDIA H100 80GB HBM3 (sm_90)" in data["by_id"]["bf16"]["message"]
