"""A value the user set that another value makes moot is never dropped without a word
(schema.MOOT_WHEN): `training.max_steps` beside `training.epochs` is refused (one line naming the file
or flag, the key and the fix, exit 2), the others are one `warning:` line on stderr; a key the user
set later (--set over the file) winning is what the precedence promises, and says nothing. Through
`envkit validate` and `envkit run --print-config`, as a user types them."""

from __future__ import annotations

import glob
import json

from conftest import ROOT, envkit

MLP = (ROOT / "templates" / "train" / "mlp_quick_test.yaml").read_text()


def write(tmp_path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return name


def test_max_steps_on_the_command_line_beside_epochs_in_the_file_is_refused_with_the_fix(tmp_path):
    """The issue's case: --set training.max_steps=300 on a config that sets epochs trained every epoch."""
    cfg = write(tmp_path, "train.yaml", MLP.replace("max_steps: 1500", "epochs: 2"))
    r = envkit("run", cfg, "--print-config", "--set", "training.max_steps=300", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "envkit: error: --set training.max_steps: 300 would be ignored: training.epochs is 2 (train.yaml), and epochs sets "
        "the run's length from the data (fix: drop training.max_steps, or --set training.epochs=null to train 300 steps)"]
    # the fix, as written, trains 300 steps
    fixed = envkit("run", cfg, "--print-config", "--json", "--set", "training.max_steps=300", "--set", "training.epochs=null", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    training = json.loads(fixed.stdout)["config"]["training"]
    assert (training["max_steps"], training["epochs"]) == (300, None)


def test_max_steps_and_epochs_in_one_file_are_refused_naming_the_file(tmp_path):
    cfg = write(tmp_path, "both.yaml", MLP.replace("max_steps: 1500", "max_steps: 300\n  epochs: 2"))
    r = envkit("validate", cfg, cwd=tmp_path)
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("envkit: error: both.yaml: training.max_steps: 300 would be ignored: training.epochs is 2 (both.yaml)")


def test_epochs_on_the_command_line_over_max_steps_in_the_file_is_the_later_word_and_says_nothing(tmp_path):
    r = envkit("validate", write(tmp_path, "train.yaml", MLP), "--set", "training.epochs=1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert "1 epochs" in r.stdout


def test_a_key_the_optimizer_does_not_read_is_one_warning_line(tmp_path):
    cfg = write(tmp_path, "train.yaml", MLP)
    r = envkit("validate", cfg, "--set", "training.optimizer=adamw", "--set", "training.momentum=0.5", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == ["warning: --set training.momentum: 0.5 has no effect: training.optimizer is adamw (--set), "
                                     "and only sgd uses momentum"]
    assert r.stdout.startswith("train.yaml: valid (mlp")


def test_print_config_says_it_on_stderr_and_keeps_json_on_stdout(tmp_path):
    cfg = write(tmp_path, "train.yaml", MLP.replace("  lr: 3.0e-3", "  lr: 3.0e-3\n  schedule: constant\n  min_lr: 1.0e-4"))
    r = envkit("run", cfg, "--print-config", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["config"]["training"]["min_lr"] == 1e-4
    assert r.stderr.splitlines() == ["warning: train.yaml: training.min_lr: 0.0001 has no effect: training.schedule is constant "
                                     "(train.yaml), and a constant schedule never decays to min_lr"]


def test_a_setting_switched_later_on_the_command_line_leaves_the_file_s_other_keys_quiet(tmp_path):
    """A sweep's grid switches the optimizer of templates/train/cifar10.yaml (sgd with Nesterov) the same
    way: the file's SGD keys go unread by the adamw runs, as the later word asked."""
    cfg = write(tmp_path, "train.yaml", MLP.replace("  lr: 3.0e-3", "  lr: 3.0e-3\n  optimizer: sgd\n  nesterov: true"))
    r = envkit("validate", cfg, "--set", "training.optimizer=adamw", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_no_shipped_template_says_a_value_is_moot():
    """The templates' training and dataloader sections as written (their datasets need files this test
    has not got): no warning, no refusal."""
    from envkit.config.config import load_config, read_yaml

    templates = sorted(glob.glob(str(ROOT / "templates" / "train" / "*.yaml")))
    assert len(templates) >= 10
    notes = {t: load_config(None, data={s: kv for s, kv in read_yaml(t).items() if s in ("training", "dataloader")}).notes
             for t in templates}
    assert {t: n for t, n in notes.items() if n} == {}
