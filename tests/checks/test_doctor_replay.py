"""Doctor on recorded machines: the chip it detects, the verdicts, the profile, the exit code.

Expectations come from the facts in docs/knowledge/ (chip tables, version gates), not from
running doctor: a regression in a parser or a gate changes what a user of that Mac would see.
"""

from __future__ import annotations

import json

import pytest

from conftest import SNAPSHOTS, envkit, snapshot_path
from envkit.checks import run_checks
from envkit.checks.report import diagnose
from envkit.facts import ReplayRunner, collect
from envkit.facts.runner import load_snapshot

# snapshot: (family, tier, perf, eff, gpu cores, memory GB, macOS, profile, {check: status}, exit code)
EXPECTED = {
    "m1_bigsur_generic": ("M1", "base", 4, 4, 8, 16, "11.2.3", "m1", {"mps": "fail"}, 1),
    "m1_pro_macos12": ("M1", "Pro", 8, 2, 16, 16, "12.7.6", "m1-pro", {"mps": "fail", "bf16": "warn"}, 1),
    "m1_max_openmp_clash": ("M1", "Max", 8, 2, 32, 64, "14.7.1", "m1-max", {"openmp": "fail", "env-vars": "warn", "mps": "pass"}, 1),
    "m1_ultra": ("M1", "Ultra", 16, 4, 64, 128, "14.6.1", "m1-ultra", {"mps": "pass", "bf16": "pass"}, 0),
    "m2_base": ("M2", "base", 4, 4, 10, 24, "14.4", "m2", {"compile": "warn", "mps": "pass"}, 0),
    "m2_max_macos13": ("M2", "Max", 8, 4, 38, 64, "13.7.4", "m2-max", {"mps": "pass", "bf16": "warn", "compile": "warn", "torch-pairing": "pass"}, 0),
    "m2_pro_rosetta": ("M2", "Pro", 8, 4, 19, 16, "15", "m2-pro", {"python-arch": "fail", "mps": "fail"}, 1),
    "m2_ultra": ("M2", "Ultra", 16, 8, 76, 192, "14.5", "m2-ultra", {"mps": "pass"}, 0),
    "m3_base": ("M3", "base", 4, 4, 10, 16, "15.1", "m3", {"mps": "pass", "bf16": "pass", "compile": "pass", "env-vars": "warn"}, 0),
    "m3_pro": ("M3", "Pro", 6, 6, 18, 36, "15.2", "m3-pro", {"mps": "pass"}, 0),
    "m3_max_macos14": ("M3", "Max", 12, 4, 40, 128, "14.5", "m3-max", {"mps": "pass", "bf16": "pass", "env-vars": "warn"}, 0),
    "m3_ultra": ("M3", "Ultra", 24, 8, 80, 512, "15.4", "m3-ultra", {"mps": "pass"}, 0),
    "m4_base": ("M4", "base", 4, 6, 10, 16, "15.3", "m4", {"mps": "pass"}, 0),
    "m4_pro_nightly": ("M4", "Pro", 10, 4, 20, 48, "15.4.1", "m4-pro", {"mps": "pass", "env-vars": "warn"}, 0),
    "m4_max_tahoe": ("M4", "Max", 12, 4, 40, 128, "26.1", "m4-max", {"mps": "pass", "torch-pairing": "pass"}, 0),
    "m5_max_unknown": ("M5", "Max", 6, 12, 40, 128, "26.2", "m5-max", {"mps": "pass"}, 0),  # known since chips.toml [spec."M5 Max"]
}


def diagnosis(name: str):
    snap = load_snapshot(snapshot_path(name))
    return diagnose(collect(ReplayRunner(snap), source=name))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_apple_silicon_snapshots(name):
    family, tier, perf, eff, gpu, mem, macos, profile, statuses, code = EXPECTED[name]
    d = diagnosis(name)
    chip = d.facts.chip
    assert (chip.vendor, chip.family, chip.tier) == ("apple", family, tier)
    assert (chip.perf_cores, chip.efficiency_cores, chip.gpu_cores) == (perf, eff, gpu)
    assert d.facts.memory_bytes == mem * 2**30
    assert d.facts.os.version == macos
    assert d.profile == profile
    by_id = {c.id: c for c in d.checks}
    for check_id, status in statuses.items():
        assert by_id[check_id].status == status, (check_id, by_id[check_id].message)
    assert d.exit_code == code
    assert [c.id for c in d.checks if c.status in ("warn", "fail") and not c.fix] == []  # every problem comes with a concrete fix


def test_generic_big_sur_brand_falls_back_to_gpu_name():
    d = diagnosis("m1_bigsur_generic")
    assert d.facts.chip.name == "Apple M1"  # "Apple processor" was replaced by the GPU's chip name


def test_rosetta_detected_and_real_macos_from_build():
    d = diagnosis("m2_pro_rosetta")
    assert d.facts.python.rosetta is True
    assert d.facts.chip.name == "Apple M2 Pro"  # Rosetta leaves the brand string alone
    assert "10.16" in d.facts.os.note and "15" in d.facts.os.note
    arch = next(c for c in d.checks if c.id == "python-arch")
    assert "arm64" in arch.fix


def test_macos_floor_fix_names_a_torch_that_still_works():
    d = diagnosis("m1_pro_macos12")
    mps = next(c for c in d.checks if c.id == "mps")
    assert "13.0" in mps.message and "12.7.6" in mps.message
    assert "envkit setup --torch '<2.5'" in mps.fix


def test_m5_max_has_its_own_profile_and_an_unknown_chip_the_nearest():
    d = diagnosis("m5_max_unknown")  # recorded before envkit knew the M5 family
    assert d.profile == "m5-max" and not d.profile_warning
    from envkit.checks.recommend import apple_profile

    name, warning = apple_profile("M6", "Max")  # a chip newer than chips.toml
    assert name == "m5-max" and "M6 Max" in warning and "nearest" in warning


def test_env_var_typo_and_dangerous_values():
    env = next(c for c in diagnosis("m3_max_macos14").checks if c.id == "env-vars")
    assert "did you mean PYTORCH_MPS_HIGH_WATERMARK_RATIO" in env.message
    env = next(c for c in diagnosis("m4_pro_nightly").checks if c.id == "env-vars")
    assert "0.0" in env.message and "system failure" in env.message


def test_openmp_clash_fix_keeps_torch():
    c = next(c for c in diagnosis("m1_max_openmp_clash").checks if c.id == "openmp")
    assert "faiss" in c.message and "pip uninstall faiss" in c.fix


def test_intel_mac():
    d = diagnosis("intel_mac")
    assert d.facts.chip.vendor == "intel" and d.facts.chip.arm64_hardware is False
    assert d.facts.python.rosetta is False  # no arm64 hardware: nothing to translate (not "unknown")
    by_id = {c.id: c for c in d.checks}
    assert by_id["mps"].status == "skip"
    assert by_id["torch"].status == "warn" and "2.2.2" in by_id["torch"].message
    assert d.profile == "cpu"
    assert d.exit_code == 0


@pytest.mark.parametrize("name,profile,cuda_status,needle", [
    ("linux_h100", "cuda-hopper", "pass", "2 x NVIDIA H100"),
    ("linux_old_driver", "cuda", "fail", "525.60.13"),
    ("linux_a100_cpu_torch", "cuda", "fail", "CPU build"),
    ("linux_rtx5090_cu126", "cuda-hopper", "fail", "cu128"),
    ("linux_no_gpu", "cpu", "skip", "no NVIDIA GPU"),
])
def test_linux_snapshots(name, profile, cuda_status, needle):
    d = diagnosis(name)
    assert d.profile == profile
    cuda = next(c for c in d.checks if c.id == "cuda")
    assert cuda.status == cuda_status and needle in cuda.message
    assert d.exit_code == (1 if cuda_status == "fail" or name == "linux_no_gpu" else 0)


def test_h100_facts():
    f = diagnosis("linux_h100").facts
    assert [g.name for g in f.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert f.gpus[0].memory_bytes == 81559 * 2**20 and f.gpus[0].driver == "550.54.15"
    assert f.gpus[0].compute_capability == "9.0"
    assert (f.torch.local, f.torch.cuda, f.torch.channel) == ("cu124", "12.4", "stable")
    assert f.chip.vendor == "intel" and f.chip.cores == 16


def test_pairing_mismatch_fails():
    c = next(c for c in diagnosis("linux_no_gpu").checks if c.id == "torch-pairing")
    assert c.status == "fail" and "0.28" in c.message


def test_nightly_channel():
    f = diagnosis("m4_pro_nightly").facts
    assert f.torch.channel == "nightly" and f.torch.base_version == "2.11.0"


def test_garbled_outputs_give_unknown_not_a_crash():
    r = envkit("doctor", "--replay", str(snapshot_path("garbled_mac")), "--json")
    assert r.returncode in (0, 1), r.stderr
    data = json.loads(r.stdout)
    assert data["facts"]["os"]["version"] is None
    assert data["facts"]["memory_bytes"] is None
    assert data["facts"]["chip"]["gpu_cores"] is None
    assert data["profile"] == "apple-silicon"  # an arm64 Python proves Apple silicon; the chip is unknown


def test_every_snapshot_replays_through_the_cli():
    for path in sorted(SNAPSHOTS.glob("*.json")):
        r = envkit("doctor", "--replay", str(path), "--json")
        assert r.returncode in (0, 1), (path.name, r.stderr)
        data = json.loads(r.stdout)
        assert {"facts", "checks", "profile"} <= set(data)
        ids = {c["id"] for c in data["checks"]}
        assert {"python-arch", "mps", "cuda", "bf16", "compile", "torch-pairing", "env-vars", "openmp"} <= ids
        assert all(c["status"] in ("pass", "warn", "fail", "skip") for c in data["checks"])
        assert r.returncode == (1 if any(c["status"] == "fail" for c in data["checks"]) else 0)


def test_checks_without_runtime_say_so():
    snap = load_snapshot(snapshot_path("m3_pro"))
    checks = {c.id: c for c in run_checks(collect(ReplayRunner(snap), runtime=True))}
    assert "version gates only" in checks["mps"].message
    snap = load_snapshot(snapshot_path("m3_max_macos14"))  # recorded with its runtime
    checks = {c.id: c for c in run_checks(collect(ReplayRunner(snap)))}
    assert checks["mps"].message.startswith("MPS available")


def test_real_h100_recorded_on_the_lent_gpu():
    """Recorded with `envkit doctor --record` on the lent H100 (torch 2.11.0 whose metadata lacks +cu130)."""
    d = diagnosis("real_h100")
    assert [g.name for g in d.facts.gpus] == ["NVIDIA H100 80GB HBM3"]
    assert d.facts.gpus[0].driver == "580.159.04" and d.facts.gpus[0].compute_capability == "9.0"
    assert d.facts.torch.local == "cu130" and d.facts.torch.cuda == "13.0"  # taken from torch's own version
    checks = {c.id: c for c in d.checks}
    assert checks["cuda"].status == "pass" and "CUDA 13.0" in checks["cuda"].message
    assert checks["bf16"].status == "pass"
    assert d.profile == "cuda-hopper" and d.exit_code == 0


def test_cuda_build_from_wheel_requirements():
    from envkit.facts.parse import cuda_from_requirements

    assert cuda_from_requirements(["nvidia-cuda-runtime-cu12==12.8.90; platform_system == 'Linux'"]) == "12.8"
    assert cuda_from_requirements(["nvidia-cuda-runtime==13.0.96; sys_platform == 'linux'"]) == "13.0"
    assert cuda_from_requirements(["sympy"]) is None
