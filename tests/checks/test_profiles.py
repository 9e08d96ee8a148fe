"""Profiles: the shipped set, inheritance and overrides, fact-dependent values, requirements,
and the `envkit profile` commands, as a user meets them."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from conftest import ROOT, SNAPSHOTS, envkit

SNAPSHOT_FILES = sorted(SNAPSHOTS.glob("*.json"))
PROFILES_DIR = ROOT / "profiles"
APPLE_TIERS = [f"m{g}{t}" for g in (1, 2, 3) for t in ("", "-pro", "-max", "-ultra")] + ["m4", "m4-pro", "m4-max", "m5", "m5-pro", "m5-max"]
REQUIRED = ["base", "cpu", "cuda", "cuda-hopper", "rocm", "xpu", "apple-silicon", "conservative", *APPLE_TIERS]
BF16_EMULATED = [n for n in APPLE_TIERS if n.startswith(("m1", "m2"))]  # bf16 emulated: no faster (transformers PR #40458)
BF16_NATIVE = [n for n in APPLE_TIERS if n not in BF16_EMULATED]
FIXED_BATCH = {"cpu": 16, "cuda-hopper": 32, "conservative": 2}  # every other shipped profile: auto (tests/train/test_auto_batch.py says why each)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No real user profiles, and a cwd without ./profiles."""
    cfg = tmp_path / "config"
    cfg.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("ENVKIT_CONFIG_DIR", str(cfg))
    monkeypatch.chdir(work)
    return {"config": cfg, "work": work, "env": {"ENVKIT_CONFIG_DIR": str(cfg)}}


def facts_of(path):
    from envkit.facts import gather

    return gather(str(path), runtime=False)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- the shipped set


def test_required_profiles_are_shipped():
    from envkit.profiles import list_profiles

    names = {p.name for p in list_profiles()}
    assert set(REQUIRED) <= names
    assert all(p.origin == "shipped" for p in list_profiles())


@pytest.mark.parametrize("name", REQUIRED)
def test_every_profile_has_every_key_with_the_right_type(name):
    import torch

    from envkit.profiles import SCHEMA, load_profile

    p = load_profile(name, facts=facts_of(SNAPSHOTS / "m3_max_macos14.json"))
    for section, fields in SCHEMA.items():
        assert set(getattr(p, section)) == set(fields), section
    assert p.torch["matmul_precision"] in ("highest", "high", "medium")
    assert isinstance(p.torch["allow_tf32"], bool) and isinstance(p.torch["cudnn_benchmark"], bool)
    dl = p.dataloader
    assert isinstance(dl["num_workers"], int) and dl["num_workers"] >= 0
    with warnings.catch_warnings():  # torch's note that 8 workers exceed this machine's cores
        warnings.simplefilter("ignore")
        # torch itself rejects persistent workers or a prefetch_factor without workers, and a bad type
        torch.utils.data.DataLoader(range(4), batch_size=2, **dl)
    t = p.train
    assert t["device"] in ("auto", "mps", "cuda", "cpu") and t["precision"] in ("auto", "fp32", "bf16", "fp16")
    assert t["compile"] in ("auto", True, False)
    assert t["batch_size"] == FIXED_BATCH.get(name, "auto")  # the probe decides, except where a profile says why not
    assert 0 < t["memory_fraction"] <= 1
    assert isinstance(t["lr"], float) and isinstance(t["grad_clip"], float)
    assert isinstance(t["grad_accum"], int) and isinstance(t["empty_cache_every"], int)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in p.env.items())
    assert p.name == name and p.description


def test_every_shipped_setting_has_a_reason_and_a_source():
    from envkit.resources import load_toml

    gates = load_toml(ROOT / "envkit" / "data" / "gates.toml")
    for path in sorted(PROFILES_DIR.glob("*.toml")):
        data = load_toml(path)
        assert data.get("description"), path
        for section in ("env", "torch", "dataloader", "train", "requires"):
            for key, item in data.get(section, {}).items():
                assert isinstance(item, dict), f"{path.name} [{section}] {key}: bare value"
                assert item.get("reason"), f"{path.name} [{section}] {key}: no reason"
                # a requirement may name a version gate instead: then the gate's rule carries the source
                source = item["source"] if "source" in item else _gate(gates, item["gate"])["source"]
                assert source.strip(), f"{path.name} [{section}] {key}: no source"


def _gate(gates: dict, name: str) -> dict:
    """The table `name` ("bf16.mps") of gates.toml, read as TOML, not through envkit's profile loader."""
    node = gates
    for part in name.split("."):
        node = node[part]
    return node


def test_values_are_true():
    """docs/knowledge/mps.md wins over what common guides set (docs/knowledge/common-guides.md)."""
    from envkit.profiles import load_profile, list_profiles

    m3 = facts_of(SNAPSHOTS / "m3_max_macos14.json")
    loaded = {}
    for info in list_profiles():
        text = info.path.read_text()
        assert "KMP_DUPLICATE_LIB_OK" not in text.split("# ")[0]
        assert "mps.allow_tf32" not in re.sub(r"#.*", "", text).replace("no torch.backends.mps.allow_tf32", "")
        p = loaded[info.name] = load_profile(info.name, facts=m3)
        assert "KMP_DUPLICATE_LIB_OK" not in p.env
        assert float(p.env.get("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.7")) != 0.0
    # pinned memory and TF32 on CUDA only: MPS warns about pinned memory and ignores it, and has no TF32 switch
    device = {name: p.train["device"] for name, p in loaded.items()}
    assert {n: p.dataloader["pin_memory"] for n, p in loaded.items()} == {n: d == "cuda" for n, d in device.items()}
    assert {n: p.torch["allow_tf32"] for n, p in loaded.items()} == {n: d == "cuda" for n, d in device.items()}
    assert {n for n, p in loaded.items() if p.torch["cudnn_benchmark"]} <= {n for n, d in device.items() if d == "cuda"}
    mps = {n: p for n, p in loaded.items() if p.train["device"] == "mps"}
    assert sorted(mps) == sorted(["apple-silicon", *APPLE_TIERS])
    assert {n: p.env["PYTORCH_ENABLE_MPS_FALLBACK"] for n, p in mps.items()} == dict.fromkeys(mps, "1")
    assert {n: p.dataloader["num_workers"] for n, p in mps.items()} == dict.fromkeys(mps, 0)  # spawn: hyrax#224
    assert {n: p.env["OMP_NUM_THREADS"] for n, p in mps.items()} == dict.fromkeys(mps, "12")  # the M3 Max's performance cores


def _recorded_macos_and_torch(snap: Path) -> tuple[tuple | None, tuple | None]:
    """(macOS release, torch release) read straight from the snapshot's recorded outputs, not
    through envkit's parsers: the expectation must not share the code under test. None = unknown."""
    raw = json.loads(snap.read_text())
    macos = None
    if raw.get("system") == "Darwin":
        text = (raw.get("commands", {}).get("sw_vers -productVersion") or "").strip()
        if re.fullmatch(r"\d+(\.\d+)*", text):
            macos = tuple(int(x) for x in text.split("."))
    m = re.match(r"(\d+)\.(\d+)", raw.get("packages", {}).get("torch") or "")
    return macos, (int(m[1]), int(m[2])) if m else None


def test_m1_m2_train_in_fp32_and_m3_m4_in_bf16_gated_on_macos_14():
    """bf16 on MPS needs macOS 14 and torch 2.6 (a nightly of 2.11 counts as 2.11); an M1/M2
    emulates bf16, so it trains in fp32 whatever the versions. An unknown macOS (a Mac profile
    resolved on Linux) keeps the profile's value."""
    from envkit.profiles import load_profile

    bf16_cases = 0
    for snap in SNAPSHOT_FILES:
        f = facts_of(snap)
        macos, torch_release = _recorded_macos_and_torch(snap)
        too_old = (macos is not None and macos < (14,)) or (torch_release is not None and torch_release < (2, 6))
        for name in BF16_EMULATED:
            p = load_profile(name, facts=f)
            assert p.train["precision"] == "fp32", name
            assert not p.requires
        for name in BF16_NATIVE:
            p = load_profile(name, facts=f)
            assert p.requires["macos"] == ">=14.0"
            expected = "fp32" if too_old else "bf16"
            assert p.train["precision"] == expected, (name, snap.name, macos, torch_release)
            bf16_cases += expected == "bf16" and macos is not None
    assert bf16_cases >= 6 * 7  # the newest Macs (macOS 15, 26; torch 2.10-2.13) are among the checked cases


def test_bf16_profile_on_macos_13_falls_back_to_fp32_with_a_warning():
    from envkit.profiles import load_profile

    f = facts_of(SNAPSHOTS / "m3_max_macos14.json")
    f.os.version = "13.6.1"
    p = load_profile("m3-max", facts=f)
    assert p.train["precision"] == "fp32"
    assert any("macos >=14.0" in w and "13.6.1" in w and "fp32" in w for w in p.warnings)
    (row,) = [r for r in p.requirement_status if r["key"] == "macos"]
    assert row["status"] == "unmet" and row["applied"] == ["train.precision = fp32"]
    # unknown macOS (an Apple profile resolved on Linux): values stay, status says unknown
    p = load_profile("m3-max", facts=facts_of(SNAPSHOTS / "linux_no_gpu.json"))
    assert p.train["precision"] == "bf16"
    assert [r["status"] for r in p.requirement_status if r["key"] == "macos"] == ["unknown"]


def test_cuda_hopper_is_tuned_for_hopper():
    from envkit.profiles import load_profile

    p = load_profile("cuda-hopper", facts=facts_of(SNAPSHOTS / "linux_h100.json"))
    assert p.train["precision"] == "bf16" and p.train["compile"] is True and p.train["device"] == "cuda"
    assert p.torch["allow_tf32"] is True and p.torch["cudnn_benchmark"] is True
    assert p.dataloader["pin_memory"] is True and p.dataloader["num_workers"] == 8  # 16 cores // 2
    assert p.dataloader["persistent_workers"] is True
    assert not p.warnings


def test_conservative_is_seed_003():
    from envkit.profiles import load_profile

    t = load_profile("conservative").train
    assert (t["precision"], t["batch_size"], t["grad_clip"]) == ("fp32", 2, 0.5)
    assert t["lr"] < load_profile("base").train["lr"]


def test_unknown_facts_fall_back_with_a_warning():
    from envkit.profiles import load_profile

    p = load_profile("apple-silicon", facts=facts_of(SNAPSHOTS / "garbled_mac.json"))
    assert p.env["OMP_NUM_THREADS"].isdigit()
    assert any("perf_cores is unknown" in w for w in p.warnings)


def test_child_environ_and_to_dict():
    from envkit.profiles import load_profile

    p = load_profile("m3-max", facts=facts_of(SNAPSHOTS / "m3_max_macos14.json"))
    env = p.child_environ({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["OMP_NUM_THREADS"] == "12" and env["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"
    # a value the user exported wins (as in envkit exec), and is named
    exported = {"PATH": "/bin", "OMP_NUM_THREADS": "99", "PYTORCH_ENABLE_MPS_FALLBACK": "1"}
    assert p.child_environ(exported)["OMP_NUM_THREADS"] == "99"
    assert p.user_kept(exported) == {"OMP_NUM_THREADS": "99"}
    d = p.to_dict()
    row = d["train"]["precision"]
    assert row["value"] == "bf16" and row["origin"] == "m3" and row["inherited"] is True and row["reason"] and row["source"]
    assert d["env"]["OMP_NUM_THREADS"]["declared"] == "{perf_cores}"
    json.dumps(d)


# --------------------------------------------------------------------------- every snapshot


@pytest.mark.parametrize("snap", SNAPSHOT_FILES, ids=[p.stem for p in SNAPSHOT_FILES])
def test_doctor_profile_exists_and_resolves_against_its_snapshot(snap, isolated):
    d = envkit("doctor", "--replay", str(snap), "--json", "--no-runtime", env=isolated["env"], cwd=isolated["work"])
    name = json.loads(d.stdout)["profile"]
    r = envkit("profile", "show", name, "--resolved", "--replay", str(snap), "--json", env=isolated["env"], cwd=isolated["work"])
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["name"] == name and shown["facts"] == str(snap)
    assert not any("{" in str(row["value"]) for sec in ("env", "train", "dataloader") for row in shown[sec].values())


# --------------------------------------------------------------------------- expressions


def test_expressions_are_arithmetic_on_facts_only():
    from envkit.profiles import ExprError, evaluate

    facts = {"memory_gb": 64, "perf_cores": 12}
    assert evaluate("memory_gb // 4", facts) == 16
    assert evaluate("max(4, min(64, memory_gb // 2))", facts) == 32
    assert evaluate("perf_cores - 2", facts) == 10
    for bad in ("__import__('os').system('touch pwned')", "memory_gb ** 99999", "().__class__", "'a' * 3",
                "open('x')", "lambda: 1", "nope + 1"):
        with pytest.raises(ExprError):
            evaluate(bad, facts)


# --------------------------------------------------------------------------- user and project profiles


def test_user_profile_overrides_and_extends_the_shipped_one(isolated):
    write(isolated["config"] / "profiles" / "m3-max.toml", 'extends = "m3-max"\n[train]\nbatch_size = 7\n')
    r = envkit("profile", "show", "m3-max", "--resolved", "--replay", str(SNAPSHOTS / "m3_max_macos14.json"), "--json",
               env=isolated["env"], cwd=isolated["work"])
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["origin"] == "user" and d["train"]["batch_size"]["value"] == 7
    assert d["train"]["precision"]["value"] == "bf16"  # inherited from the shipped m3-max chain
    assert d["chain"][:2] == ["m3-max", "m3-max"]
    lst = json.loads(envkit("profile", "list", "--json", env=isolated["env"], cwd=isolated["work"]).stdout)
    (row,) = [p for p in lst["profiles"] if p["name"] == "m3-max"]
    assert row["origin"] == "user" and row["overrides"]


def test_project_profile_wins_over_user(isolated):
    write(isolated["config"] / "profiles" / "mine.toml", 'extends = "cpu"\ndescription = "user"\n')
    write(isolated["work"] / "profiles" / "mine.toml",
          'extends = "cpu"\ndescription = "project"\n[env.MY_VAR]\nvalue = "x"\nreason = "r"\nsource = "s"\n')
    from envkit.profiles import load_profile

    p = load_profile("mine")
    assert p.origin == "project" and p.description == "project" and p.env["MY_VAR"] == "x"
    assert p.chain == ["mine", "cpu", "base"]


def test_cycle_unknown_parent_bad_toml_and_typos_are_clear_errors(isolated):
    d = isolated["config"] / "profiles"
    write(d / "a.toml", 'extends = "b"\n')
    write(d / "b.toml", 'extends = "a"\n')
    write(d / "orphan.toml", 'extends = "no-such-parent"\n')
    write(d / "broken.toml", 'extends = "cpu"\n[train\nbatch_size = 3\n')
    write(d / "typo.toml", 'extends = "cpu"\n[train]\nbatch_sise = 3\n')
    write(d / "badval.toml", 'extends = "cpu"\n[train]\nprecision = "fp8"\n')
    write(d / "nl.toml", 'extends = "cpu"\n[env]\nX = "a\\nb"\n')
    write(d / "badexpr.toml", 'extends = "cpu"\n[train]\nbatch_size = "{__import__(\'os\')}"\n')
    cases = {
        "a": ["cycle", "a -> b -> a", "a.toml"],
        "orphan": ["unknown profile 'no-such-parent'", "orphan.toml"],
        "broken": ["not valid TOML", "broken.toml"],
        "typo": ["did you mean 'batch_size'", "typo.toml"],
        "badval": ["fp8", "badval.toml"],
        "nl": ["newline", "nl.toml"],
        "badexpr": ["only arithmetic", "badexpr.toml"],
    }
    for name, needles in cases.items():
        r = envkit("profile", "show", name, env=isolated["env"], cwd=isolated["work"])
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        line = r.stderr.strip()
        assert line.startswith("envkit: error:") and "\n" not in line, line
        for n in needles:
            assert n in line, (name, line)
    r = envkit("profile", "show", "m3-maxx", env=isolated["env"], cwd=isolated["work"])
    assert r.returncode == 2 and "m3-maxx" in r.stderr and "envkit profile list" in r.stderr and "m3-max" in r.stderr


def test_load_profile_unknown_name_raises_envkit_error():
    from envkit.errors import EnvkitError
    from envkit.profiles import load_profile

    with pytest.raises(EnvkitError) as exc:
        load_profile("no-such-profile")
    assert exc.value.where == "no-such-profile" and exc.value.fix == "envkit profile list"
    with pytest.raises(EnvkitError):
        load_profile("../../etc/passwd")


# --------------------------------------------------------------------------- commands


def test_profile_list_marks_the_recommended_profile(isolated):
    r = envkit("profile", "list", "--replay", str(SNAPSHOTS / "m5_max_unknown.json"), env=isolated["env"], cwd=isolated["work"])
    assert r.returncode == 0, r.stderr
    assert re.search(r"^\* m5-max\s", r.stdout, re.M)  # the M5 Max has its own profile now
    assert "nearest" not in r.stdout
    r = envkit("profile", "list", "--json", env=isolated["env"], cwd=isolated["work"])
    d = json.loads(r.stdout)
    assert d["recommended"] == "cpu"  # this Linux machine without a GPU
    assert [p["name"] for p in d["profiles"] if p["recommended"]] == ["cpu"]


def test_profile_show_marks_inherited_values_and_reasons(isolated):
    r = envkit("profile", "show", "m3-max", env=isolated["env"], cwd=isolated["work"])
    assert r.returncode == 0, r.stderr
    assert re.search(r'precision\s+= "bf16"\s+\[from m3\]', r.stdout)
    assert 'OMP_NUM_THREADS             = "{perf_cores}"' in r.stdout  # declared, not resolved
    assert "# source: docs/knowledge/mps.md" in r.stdout


def test_profile_show_resolved_reports_unmet_requirement(isolated):
    r = envkit("profile", "show", "m3-max", "--resolved", "--replay", str(SNAPSHOTS / "m2_max_macos13.json"),
               env=isolated["env"], cwd=isolated["work"])
    assert r.returncode == 0, r.stderr
    assert "macos >=14.0: unmet (machine: 13.7.4): train.precision = fp32 instead" in r.stdout
    assert re.search(r'precision\s+= "fp32"', r.stdout)
    assert "warning: m3-max requires macos >=14.0" in r.stderr


def test_profile_diff(isolated):
    r = envkit("profile", "diff", "m1", "m3", "--replay", str(SNAPSHOTS / "m3_base.json"), env=isolated["env"], cwd=isolated["work"])
    assert r.returncode == 0, r.stderr
    assert re.search(r'train\.precision\s+"fp32"\s+"bf16"', r.stdout)
    d = json.loads(envkit("profile", "diff", "cpu", "cuda-hopper", "--json", env=isolated["env"], cwd=isolated["work"]).stdout)
    keys = {(x["section"], x["key"]) for x in d["differences"]}
    assert ("train", "compile") in keys and ("dataloader", "pin_memory") in keys and ("env", "OMP_NUM_THREADS") in keys


# --------------------------------------------------------------------------- torch settings


def test_apply_torch_settings_on_cpu():
    torch = pytest.importorskip("torch")
    from envkit.profiles.torch_settings import apply_torch_settings

    before = torch.get_float32_matmul_precision()
    try:
        msgs = apply_torch_settings({"matmul_precision": "high", "allow_tf32": True, "cudnn_benchmark": True}, "cpu")
        assert torch.get_float32_matmul_precision() == "high"
        assert any("matmul precision: high" in m for m in msgs)
        assert any("allow_tf32 ignored on cpu" in m for m in msgs)
        assert not hasattr(torch.backends.mps, "allow_tf32")
    finally:
        torch.set_float32_matmul_precision(before)


def test_help_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, envkit.cli\n"
            "try:\n    envkit.cli.main(['--help'])\nexcept SystemExit: pass\n"
            "import envkit.profiles, envkit.profiles.envscripts, envkit.commands.profile, envkit.commands.env\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().endswith("False"), out.stdout + out.stderr


def test_docs_example_profile_works(isolated):
    text = (ROOT / "docs" / "profiles.md").read_text()
    example = text.split("## The format", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    write(isolated["work"] / "profiles" / "mine.toml", example)
    r = envkit("env", "--profile", "mine", "--replay", str(SNAPSHOTS / "m3_max_macos14.json"), "--shell", "bash",
               env=isolated["env"], cwd=isolated["work"])
    assert r.returncode == 0, r.stderr
    assert "export OMP_NUM_THREADS=12\n" in r.stdout and "export PYTORCH_MPS_FAST_MATH=1\n" in r.stdout
    d = json.loads(envkit("profile", "show", "mine", "--resolved", "--replay", str(SNAPSHOTS / "m3_max_macos14.json"),
                          "--json", env=isolated["env"], cwd=isolated["work"]).stdout)
    assert d["origin"] == "project" and d["chain"][:2] == ["mine", "m3-max"]
    assert d["train"]["batch_size"]["value"] == "auto" and d["train"]["memory_fraction"]["value"] == 0.7
    assert d["train"]["precision"]["value"] == "bf16"
