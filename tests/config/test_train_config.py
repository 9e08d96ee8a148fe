"""train.yaml validation, overrides, provenance, templates: the CLI as a user runs it (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, envkit, snapshot_path

TEMPLATES = ROOT / "templates" / "train"
QUICK = TEMPLATES / "gpt_quick_test.yaml"


def one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    err = res.stderr.strip()
    assert err.count("\n") == 0, err  # one line, no traceback
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    return err


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def quick_with(tmp_path, old, new, name="train.yaml"):
    text = QUICK.read_text()
    assert old in text
    return write(tmp_path, name, text.replace(old, new))


def test_init_help_and_list_give_the_default_template_the_same_time():
    """One figure, measured (benchmarks/RESULTS.md: 76.5 s wall, 73.5 s of CPU, for the 1000 steps on one
    core of the 2-core box), in both places a newcomer reads it."""
    help_text = " ".join(envkit("init", "--help").stdout.split())
    (listed,) = [line for line in envkit("init", "--list").stdout.splitlines() if line.startswith("gpt_quick_test ")]
    assert "(default: the gpt quick test, about 80 s on one CPU core)" in help_text
    assert listed.endswith("a small transformer learns 2-digit addition (about 80 s on one CPU core)"), listed


def test_empty_file(tmp_path):
    one_line_error(envkit("validate", str(write(tmp_path, "e.yaml", ""))), "empty")


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    p = write(tmp_path, "s.yaml", "training:\n  lr: 1e-3\n   batch_size: 4\n")
    one_line_error(envkit("validate", str(p)), "s.yaml:3:", "YAML syntax error")


def test_unknown_key_did_you_mean(tmp_path):
    p = quick_with(tmp_path, "  max_steps:", "  max_stesp:")
    one_line_error(envkit("validate", str(p)), "training.max_stesp", "did you mean 'max_steps'")


def test_unknown_section(tmp_path):
    p = write(tmp_path, "u.yaml", "trainng:\n  lr: 0.1\n")
    one_line_error(envkit("validate", str(p)), "did you mean 'training'")


def test_wrong_type(tmp_path):
    p = quick_with(tmp_path, "  batch_size: 64", '  batch_size: "lots"')
    one_line_error(envkit("validate", str(p)), "training.batch_size", "expected an integer or auto, got str 'lots'",
                   "(fix: give training.batch_size a whole number or auto, e.g. `batch_size: 32`)")


def test_negative_lr(tmp_path):
    p = quick_with(tmp_path, "  lr: 5.0e-3", "  lr: -0.001")
    one_line_error(envkit("validate", str(p)), "training.lr", "greater than 0")


def test_missing_dataset_path(tmp_path):
    p = write(tmp_path, "m.yaml", "dataset:\n  type: text\n  path: nowhere/input.txt\nmodel:\n  type: gpt\n")
    one_line_error(envkit("validate", str(p)), "dataset.path", "does not exist")


def test_mps_refused_on_linux_naming_the_check(tmp_path):
    p = quick_with(tmp_path, "  type: auto", "  type: mps")
    one_line_error(envkit("validate", str(p)), "device.type", "doctor check 'mps'")


@pytest.mark.parametrize("snap", ["m1_pro_macos12", "m2_max_macos13"])
def test_bf16_refused_on_old_macos_replay(tmp_path, snap):
    p = quick_with(tmp_path, "  precision: auto", "  precision: bf16 #")
    p = write(tmp_path, "b.yaml", p.read_text().replace("  type: auto", "  type: mps"))
    one_line_error(envkit("validate", str(p), "--replay", str(snapshot_path(snap))), "training.precision", "doctor check 'bf16'", "macOS 14")


def test_bf16_on_cpu_is_allowed(tmp_path):
    # torch has CPU bf16 autocast: refusing it would be wrong
    res = envkit("validate", str(QUICK), "--set", "training.precision=bf16", "--set", "device.type=cpu")
    assert res.returncode == 0, res.stderr


def test_set_overrides_checked(tmp_path):
    one_line_error(envkit("validate", str(QUICK), "--set", "training.lr=fast"), "--set training.lr", "expected a number",
                   "(fix: give training.lr a number (3e-4, 0.001, 2), e.g. --set training.lr=0.0003)")
    one_line_error(envkit("validate", str(QUICK), "--set", "training.compile=yes please"), "--set training.compile",
                   "(fix: give training.compile auto, true or false, e.g. --set training.compile=auto)")
    one_line_error(envkit("validate", str(QUICK), "--set", "trainig.lr=1"), "did you mean 'training'")
    one_line_error(envkit("validate", str(QUICK), "--set", "model.hidden=3"), "does not apply to model type gpt")


def test_print_config_shows_origins():
    res = envkit("run", str(QUICK), "--print-config", "--json", "--set", "training.lr=1e-4", "--profile", "cpu")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["config"]["training"]["lr"] == 1e-4
    assert data["origin"]["training.lr"] == "cli"
    assert data["origin"]["training.max_steps"] == "yaml"
    assert data["origin"]["eval.batches"] == "yaml"
    assert data["origin"]["training.beta1"] == "default"
    text = envkit("run", str(QUICK), "--print-config").stdout
    assert "# cli" not in text and "# yaml" in text


def test_profile_supplies_defaults_below_yaml(tmp_path):
    """Precedence, lowest first: default < profile < YAML < --set. A user profile sets lr, batch
    size, clip and workers; the YAML sets lr and batch size; --set sets the batch size again."""
    cfg_dir = tmp_path / "config"
    (cfg_dir / "profiles").mkdir(parents=True)
    (cfg_dir / "profiles" / "mine.toml").write_text(
        'extends = "cpu"\n[train]\nlr = 0.0123\nbatch_size = 48\ngrad_clip = 0.25\n[dataloader]\nnum_workers = 3\n')
    p = write(tmp_path, "t.yaml", "model:\n  type: gpt\ntraining:\n  lr: 0.002\n  batch_size: 24\n")
    res = envkit("run", str(p), "--print-config", "--json", "--profile", "mine", "--set", "training.batch_size=12",
                 env={"ENVKIT_CONFIG_DIR": str(cfg_dir)})
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    values, origin = data["config"], data["origin"]
    assert (values["training"]["lr"], origin["training.lr"]) == (0.002, "yaml")
    assert (values["training"]["batch_size"], origin["training.batch_size"]) == (12, "cli")
    assert (values["training"]["grad_clip"], origin["training.grad_clip"]) == (0.25, "profile:mine")
    assert (values["dataloader"]["num_workers"], origin["dataloader.num_workers"]) == (3, "profile:mine")
    assert (values["training"]["warmup_steps"], origin["training.warmup_steps"]) == (0, "default")
    assert data["profile"] == "mine"


def test_all_templates_exist():
    names = sorted(p.stem for p in TEMPLATES.glob("*.yaml"))
    for model in ("gpt", "mlp", "cnn"):
        for kind in ("quick_test", "full_training", "conservative"):
            assert f"{model}_{kind}" in names
    assert "gpt2_small_tokens" in names


def test_all_templates_valid(tmp_path):
    """Every template validates; a tokens template is given a folder of token files to point at."""
    np = __import__("pytest").importorskip("numpy")
    data = tmp_path / "tokens"
    data.mkdir()
    for name in ("train.bin", "val.bin"):
        np.zeros(40_000, dtype=np.uint16).tofile(data / name)
    for n in sorted(p.stem for p in TEMPLATES.glob("*.yaml")):
        text = (TEMPLATES / f"{n}.yaml").read_text()
        extra = ["--set", f"dataset.path={data}"] if "type: tokens" in text else []
        if "type: cifar10" in text:
            from cifar_fixture import write_cifar10

            extra = ["--set", f"dataset.path={write_cifar10(tmp_path, per_file=2, test=2)}"]
        res = envkit("validate", str(TEMPLATES / f"{n}.yaml"), *extra)
        assert res.returncode == 0, (n, res.stderr)


def test_init_writes_gpt_quick_test_by_default(tmp_path):
    res = envkit("init", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "train.yaml").read_text() == QUICK.read_text()
    one_line_error(envkit("init", cwd=tmp_path), "exists")
    res = envkit("init", "cnn.yaml", "--template", "cnn_quick_test", cwd=tmp_path)
    assert res.returncode == 0 and "type: cnn" in (tmp_path / "cnn.yaml").read_text()
    one_line_error(envkit("init", "x.yaml", "--template", "gpt_quik_test", cwd=tmp_path), "did you mean 'gpt_quick_test'")


def test_validate_does_not_import_torch():
    code = ("import sys; from envkit.cli import main\n"
            "try:\n  main(['validate', %r])\nexcept SystemExit: pass\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n" % str(QUICK))
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_config_hash_ignores_logging_only():
    from envkit.config.config import load_config

    a = load_config(QUICK)
    b = load_config(QUICK, overrides=["logging.every_steps=1", "checkpoint.every_steps=5"])
    c = load_config(QUICK, overrides=["training.lr=1e-4"])
    assert a.config_hash() == b.config_hash() != c.config_hash()


def test_auto_in_yaml_takes_the_profiles_tuned_value(tmp_path):
    """The quick-test template says precision/device auto: on an M3 Max (macOS 14) that must mean
    the m3-max profile's bf16 on mps, not fp32; an explicit value in the YAML still wins."""
    snap = str(snapshot_path("m3_max_macos14"))
    res = envkit("validate", str(QUICK), "--replay", snap, "--profile", "m3-max", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    values = out["config"]
    assert out["origin"]["training.precision"].startswith("profile:m3-max")
    assert values["training"]["precision"] == "bf16" and values["device"]["type"] == "mps"
    res = envkit("validate", str(QUICK), "--replay", snap, "--profile", "m3-max", "--set", "training.precision=fp32", "--json")
    out = json.loads(res.stdout)
    assert out["config"]["training"]["precision"] == "fp32" and out["origin"]["training.precision"] == "cli"


def test_ddp_bucket_size_comes_from_the_profile():
    """cuda-hopper's measured 100 MB DDP bucket reaches the trainer (two processes on a Hopper
    GPU run with it); profiles without a measurement keep torch's 25; --set still wins."""
    def bucket(*args):
        res = envkit("run", str(QUICK), "--print-config", "--json", *args)
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        return data["config"]["training"]["ddp_bucket_mb"], data["origin"]["training.ddp_bucket_mb"]

    assert bucket("--profile", "cuda-hopper") == (100.0, "profile:cuda-hopper")
    assert bucket("--profile", "cpu") == (25.0, "profile:cpu")
    assert bucket("--profile", "cuda-hopper", "--set", "training.ddp_bucket_mb=50") == (50.0, "cli")


@pytest.mark.parametrize("setting, said", [
    ("model.kwargs=[1]", "--set model.kwargs: expected a mapping, got list (fix: give model.kwargs a mapping, e.g. --set model.kwargs={key: value})"),
    ("logging.trackers=5",
     "--set logging.trackers: expected a list, got int 5 (fix: give logging.trackers a list, e.g. --set logging.trackers=[a, b])"),
    ("dataset.task=[a]", "--set dataset.task: expected a string, got list (fix: give dataset.task text, e.g. --set dataset.task=arithmetic)"),
])
def test_a_value_of_another_type_names_the_key_and_the_form(setting, said):
    """The text, list and mapping kinds (config/kinds.py): one line, exit 2, the form the key takes."""
    one_line_error(envkit("validate", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--set", setting), said)
