"""AMD (ROCm) and Intel (XPU) machines from recorded tool outputs (tests/snapshots/
build_accel_snapshots.py): the GPU doctor names, the build setup plans, the profile; and the
other facts of today: the M5 family, MFU peaks of the NVL/PCIe cards, bf16 on emulating GPUs,
PYTORCH_* names PyTorch never reads."""

from __future__ import annotations

import json

import pytest

from conftest import envkit, load_snapshot, snapshot_path
from envkit.checks.report import diagnose
from envkit.facts import ReplayRunner, collect
from envkit.facts import accel_parse as ap


def diagnosis(name: str, **changes):
    snap = load_snapshot(name)
    for key, value in changes.items():
        snap[key] = value
    return diagnose(collect(ReplayRunner(snap), source=name))


def check(d, check_id):
    return next(c for c in d.checks if c.id == check_id)


def plan(tmp_path, name, *args):
    r = envkit("setup", "--replay", str(snapshot_path(name)), "--dry-run", "--json", *args, cwd=tmp_path, timeout=60)
    return r, (json.loads(r.stdout) if r.returncode == 0 else None)


# --------------------------------------------------------------------------- parsers


def _planted_agent(n: int, name: str, device_type: str) -> str:
    """An agent block in the recorded layout (tests/snapshots/build_accel_snapshots.py)."""
    return (f"*******                  \nAgent {n}                  \n*******                  \n"
            f"  Name:                    {name:<35}\n  Marketing Name:          {name:<35}\n"
            f"  Device Type:             {device_type:<35}\n")


def test_rocminfo_keeps_gpu_agents_only():
    text = load_snapshot("linux_rocm_rx7900xtx")["commands"]["rocminfo"]
    # the Ryzen CPU agent is not a GPU; the trimmed output holds no pool sections, so no memory size
    assert ap.parse_rocminfo(text) == [{"name": "Radeon RX 7900 XTX", "arch": "gfx1100", "memory_bytes": None}]
    # Each of the parser's two filters on its own: an agent that is no GPU though its Name reads like a
    # gfx target (kept without the Device Type filter), and a GPU agent whose Name is no gfx target
    # (without the gfx filter it has no architecture to report). Both planted beside the recorded agents.
    planted = text.replace("*** Done ***", _planted_agent(3, "gfx1150", "DSP") + _planted_agent(4, "AMD Radeon Graphics", "GPU")
                           + "*** Done ***")
    assert planted.count("Agent ") == 4
    assert ap.parse_rocminfo(planted) == [{"name": "Radeon RX 7900 XTX", "arch": "gfx1100", "memory_bytes": None}]
    assert ap.parse_rocminfo("ROCk module is NOT loaded, possibly no GPU devices\n") == []
    assert ap.parse_rocm_version("6.4.1-83\n") == "6.4.1" and ap.parse_rocm_version(None) is None


def test_amd_smi_static_gives_name_target_and_driver():
    text = load_snapshot("linux_rocm_mi350x")["commands"]["amd-smi static --asic --driver"]
    assert ap.parse_amd_smi_static(text) == [{"name": "AMD Instinct MI350X", "arch": "gfx950", "driver": "6.18.3"}]
    d = diagnosis("linux_rocm_mi350x")  # amd-smi answered: rocminfo is not needed
    c = check(d, "rocm-xpu")
    assert "AMD Instinct MI350X (gfx950), ROCm 7.0.2" in c.message and "rocm7.2" in c.message and d.profile == "rocm"


def test_intel_tools_and_lspci():
    snap = load_snapshot("linux_xpu_arc_a770")
    assert ap.parse_xpu_smi_discovery(snap["commands"]["xpu-smi discovery"]) == [
        {"name": "Intel(R) Arc(TM) A770 Graphics", "device_id": "0x56a0", "driver": "17013219"}]
    sycl = ap.parse_sycl_ls(snap["commands"]["sycl-ls"])
    assert [g["name"] for g in sycl] == ["Intel(R) Arc(TM) A770 Graphics"]  # the OpenCL CPU line is not a GPU
    lspci = ("00:02.0 VGA compatible controller [0300]: Intel Corporation AlderLake-S GT1 [8086:4680] (rev 0c)\n"
             "03:00.0 VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] "
             "Navi 31 [Radeon RX 7900 XT/7900 XTX] [1002:744c] (rev c8)\n"
             "01:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA102 [GeForce RTX 3090] [10de:2204] (rev a1)\n")
    assert [(g["vendor"], g["device_id"]) for g in ap.parse_lspci(lspci)] == [("intel", "0x4680"), ("amd", "0x744c")]


# --------------------------------------------------------------------------- doctor


def test_doctor_on_amd_names_gpu_build_and_profile():
    d = diagnosis("linux_rocm_rx7900xtx")
    c = check(d, "rocm-xpu")
    assert c.status == "pass" and "Radeon RX 7900 XTX (gfx1100)" in c.message and "ROCm 6.4.1" in c.message
    assert "2.9.1+rocm6.4" in c.message and "rocm6.4 holds gfx1100" in c.message
    assert d.profile == "rocm" and d.exit_code == 0
    assert check(d, "cuda").status == "skip"  # no NVIDIA GPU: the CUDA check does not judge an AMD card


def test_doctor_on_amd_with_cpu_torch_and_with_a_build_lacking_its_target():
    d = diagnosis("linux_rocm_rx7900xtx", packages={"torch": "2.9.1+cpu", "numpy": "2.2.6"})
    c = check(d, "rocm-xpu")
    assert c.status == "fail" and "not a ROCm build" in c.message and "rocm7.2" in c.message and c.fix
    # the RX 590's gfx803 is in no build: a CPU torch is the best there is (warn), a ROCm one fails
    rx590 = diagnosis("linux_rocm_rx590")
    assert check(rx590, "rocm-xpu").status == "warn" and "gfx803" in check(rx590, "rocm-xpu").message and rx590.profile == "cpu"
    bad = diagnosis("linux_rocm_rx590", packages={"torch": "2.8.0+rocm6.4", "numpy": "2.2.6"})
    assert check(bad, "rocm-xpu").status == "fail" and bad.exit_code == 1
    # a Radeon VII (gfx906) under 2.10's rocm7.0 build, which dropped gfx906: fails, and the fix installs one that holds it
    snap = load_snapshot("linux_rocm_rx7900xtx")
    cmds = dict(snap["commands"], rocminfo=snap["commands"]["rocminfo"].replace("gfx1100", "gfx906").replace("Radeon RX 7900 XTX", "AMD Radeon VII"))
    vii = diagnosis("linux_rocm_rx7900xtx", commands=cmds, packages={"torch": "2.10.0+rocm7.0", "numpy": "2.2.6"})
    c = check(vii, "rocm-xpu")
    assert c.status == "fail" and "holds no kernels for gfx906" in c.message and "envkit setup" in c.fix
    # where torch ran, its own get_arch_list() judges (a ROCm build the table does not know)
    runtime = {"ok": True, "torch_version": "2.11.0+rocm7.9", "hip_version": "7.9", "cuda_available": True, "cuda_built": True,
               "arch_list": ["gfx942", "gfx950"], "devices": []}
    ran = diagnosis("linux_rocm_rx7900xtx", packages={"torch": "2.11.0+rocm7.9", "numpy": "2.2.6"}, runtime=runtime)
    c = check(ran, "rocm-xpu")
    assert c.status == "fail" and "(gfx1100) is not in this ROCm build's torch.cuda.get_arch_list()" in c.message
    runtime["arch_list"].append("gfx1100")
    ok = diagnosis("linux_rocm_rx7900xtx", packages={"torch": "2.11.0+rocm7.9", "numpy": "2.2.6"}, runtime=runtime)
    assert check(ok, "rocm-xpu").status == "pass"


def test_doctor_on_intel_arc_names_gpu_build_and_profile():
    d = diagnosis("linux_xpu_arc_a770")
    c = check(d, "rocm-xpu")
    assert c.status == "fail" and "Intel(R) Arc(TM) A770 Graphics" in c.message and "xpu build" in c.message
    assert d.profile == "xpu"
    ok = diagnosis("linux_xpu_arc_a770", packages={"torch": "2.9.1+xpu", "numpy": "2.2.6"})
    assert check(ok, "rocm-xpu").status == "pass" and ok.exit_code == 0


def test_integrated_graphics_seen_by_lspci_are_no_gpu_to_train_on():
    """An Intel desktop's UHD graphics or a Ryzen's Radeon iGPU, named by lspci only: the CPU build and
    profile, no warning (a CPU user is not nagged), and doctor says why it skipped."""
    for lspci, needle in (("00:02.0 VGA compatible controller [0300]: Intel Corporation AlderLake-S GT1 [8086:4680] (rev 0c)\n", "Arc"),
                          ("0b:00.0 VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] Cezanne [1002:1638] (rev c8)\n",
                           "install ROCm")):
        snap = load_snapshot("linux_no_gpu")
        d = diagnosis("linux_no_gpu", commands=dict(snap["commands"], **{"lspci -nn": lspci}))
        assert len(d.facts.other_gpus) == 1
        c = check(d, "rocm-xpu")
        assert c.status == "skip" and needle in c.message
        assert d.profile == "cpu" and not d.profile_warning


@pytest.mark.parametrize("name", ["linux_h100", "linux_no_gpu", "linux_a100_cpu_torch", "m4_max_tahoe"])
def test_machines_without_amd_or_intel_gpus_unchanged(name):
    d = diagnosis(name)
    assert check(d, "rocm-xpu").status == "skip" and not d.facts.other_gpus


# --------------------------------------------------------------------------- setup plans


def test_setup_plans_rocm_and_xpu_indexes(tmp_path):
    r, p = plan(tmp_path, "linux_rocm_rx7900xtx")
    assert r.returncode == 0, r.stderr
    assert (p["device"], p["backend"], p["profile"]) == ("cuda", "rocm7.2", "rocm")
    assert any("not read off the index" in n for n in p["notes"])  # 2.14's ROCm row is not from a source
    assert p["index_url"] == "https://download.pytorch.org/whl/rocm7.2"
    r, p = plan(tmp_path, "linux_rocm_rx7900xtx", "--torch", "2.9")
    assert p["index_url"] == "https://download.pytorch.org/whl/rocm6.4"  # 2.9 shipped rocm6.3 and rocm6.4
    r, p = plan(tmp_path, "linux_xpu_arc_a770")
    assert (p["device"], p["index_url"], p["profile"]) == ("xpu", "https://download.pytorch.org/whl/xpu", "xpu")
    r, p = plan(tmp_path, "linux_rocm_rx590")  # gfx803: no ROCm build holds it -> the CPU build, said why
    assert p["index_url"] == "https://download.pytorch.org/whl/cpu" and any("gfx803" in n for n in p["notes"])
    r, _ = plan(tmp_path, "linux_xpu_arc_a770", "--torch", "2.4")
    assert r.returncode == 1 and "first is 2.5" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / ".envkit").exists()


def test_rocm_pick_for_a_target_newer_releases_dropped():
    from envkit.checks import accel
    from envkit.errors import NoBuildError
    from envkit.facts.model import Facts, GPUInfo, OSInfo, PythonInfo, ChipInfo

    facts = Facts(os=OSInfo("Linux"), python=PythonInfo(), chip=ChipInfo(),
                  gpus=[GPUInfo(name="AMD Radeon VII", vendor="amd", arch="gfx906:sramecc+:xnack-")])
    stable = accel.pick(facts, None, "stable")  # rocm7 builds dropped gfx906: the newest line that holds it
    assert stable.limit == "<2.10" and stable.backend == "rocm6.4"
    with pytest.raises(NoBuildError) as exc:
        accel.pick(facts, "2.13", "stable")
    assert exc.value.exit_code == 1 and "gfx906" in exc.value.message and "--torch 2.9" in exc.value.fix


# --------------------------------------------------------------------------- other facts of today


def test_m5_family_known_and_profiles_cite_apple_figures():
    from envkit.facts.collect import chips_data
    from envkit.checks.recommend import apple_profile
    from envkit.profiles import load_profile

    spec = chips_data()["spec"]
    for chip, profile in (("M5", "m5"), ("M5 Pro", "m5-pro"), ("M5 Max", "m5-max"), ("M4", "m4")):
        family, _, tier = chip.partition(" ")
        assert apple_profile(family, tier or "base") == (profile, None)
        desc = load_profile(profile).description
        assert f"{spec[chip]['bandwidth_gbs']} GB/s" in desc and f"up to {spec[chip]['memory_gb_max']} GB" in desc
        assert spec[chip]["source"].startswith("Apple")
    assert "4P+4E" in spec["M4"]["cpu"] and 8 in spec["M4"]["gpu_cores"]  # the iMac's M4
    from envkit.facts import machine_label

    # an M5 Max's perflevel0/1 are 6 super + 12 performance cores, not efficiency cores
    assert "(6S+12P, 40-core GPU, 128 GiB)" in machine_label(diagnosis("m5_max_unknown").facts)
    assert "(12P+4E, 40-core GPU" in machine_label(diagnosis("m4_max_tahoe").facts)


def test_mfu_peaks_tell_nvl_and_pcie_from_sxm():
    from envkit.train.watching.mfu import peak_flops

    assert peak_flops("NVIDIA H200 NVL")[0] == 835e12 and peak_flops("NVIDIA H200")[0] == 989e12
    assert peak_flops("NVIDIA H800 PCIe")[0] == 756e12 and peak_flops("NVIDIA H800")[0] == 989e12


def test_bf16_judged_by_capability_not_by_is_bf16_supported():
    d = diagnosis("linux_t4_py39")  # the runtime says cuda_bf16 True: torch counts emulation
    assert d.facts.runtime["cuda_bf16"] is True
    c = check(d, "bf16")
    assert c.status == "warn" and "emulated" in c.message and "fp16" in c.fix


def test_pytorch_names_pytorch_never_reads():
    d = diagnosis("linux_h100", env={"PYTORCH_MPS_DISABLE": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    c = check(d, "env-vars")
    assert c.status == "warn" and "PYTORCH_MPS_DISABLE is set, but PyTorch never reads it" in c.message
    assert "PYTORCH_CUDA_ALLOC_CONF" not in c.message and "unset PYTORCH_MPS_DISABLE" in c.fix


def test_lock_platform_tells_rocm_from_cuda():
    """torch calls a ROCm GPU "cuda": the lock must not, or a ROCm lock would rebuild on an NVIDIA box."""
    from envkit.install.lock.machine import platform_differences, platform_of

    amd, nvidia = diagnosis("linux_rocm_rx7900xtx").facts, diagnosis("linux_h100").facts
    rocm_lock = platform_of(amd, device="cuda", backend="rocm7.2")
    assert rocm_lock["device"] == "rocm" and rocm_lock["gpus"] == ["Radeon RX 7900 XTX"]
    assert any("accelerator" in d for d in platform_differences(rocm_lock, platform_of(nvidia, device="cuda")))
    assert not platform_differences(rocm_lock, platform_of(amd, device="cuda"))
