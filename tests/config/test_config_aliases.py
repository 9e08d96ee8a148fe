"""The names people bring from nanoGPT, Hugging Face and Lightning get a did-you-mean to the envkit key
(envkit/data/config_aliases.toml), in train.yaml and in `--set` alike: one line naming the file or
flag, the key, what was meant and how to write it, exit 2. A key of envkit's own in the wrong section
is pointed to its section."""

from __future__ import annotations

import pytest

from conftest import ROOT, envkit

MLP = (ROOT / "templates" / "train" / "mlp_quick_test.yaml").read_text()


def refused(r) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("typed,meant", [("learning_rate", "lr"), ("lr_rate", "lr"), ("bs", "batch_size"), ("batch", "batch_size"),
                                         ("steps", "max_steps"), ("num_steps", "max_steps"), ("max_iters", "max_steps"),
                                         ("num_train_epochs", "epochs"), ("gradient_accumulation_steps", "grad_accum"),
                                         ("max_grad_norm", "grad_clip"), ("warmup_iters", "warmup_steps")])
def test_a_name_from_another_trainer_in_the_training_section_gets_the_envkit_key(tmp_path, typed, meant):
    (tmp_path / "train.yaml").write_text(MLP.replace("  max_steps: 1500", f"  max_steps: 1500\n  {typed}: 3"))
    line = refused(envkit("validate", "train.yaml", cwd=tmp_path))
    assert line == (f"envkit: error: train.yaml: training.{typed}: unknown key '{typed}' in section 'training' "
                    f"(did you mean '{meant}'?) (fix: rename {typed} to {meant} in section training)")


@pytest.mark.parametrize("yaml_text,path,meant,fix", [
    ("model:\n  epochs: 3\n", "model.epochs", "training.epochs", "move epochs into section training"),
    ("model:\n  warmup_steps: 3\n", "model.warmup_steps", "training.warmup_steps", "move warmup_steps into section training"),
    ("epochs: 3\n", "epochs", "training.epochs", "move epochs into section training"),
    ("optimizer:\n  weight_decay: 0.1\n", "optimizer", "training.weight_decay", "move weight_decay into section training"),
    ("eval:\n  eval_interval: 50\n", "eval.eval_interval", "every_steps", "rename eval_interval to every_steps in section eval"),
    ("training:\n  eval_interval: 50\n", "training.eval_interval", "eval.every_steps", "write eval_interval as every_steps in section eval"),
])
def test_a_key_in_the_wrong_section_is_pointed_to_its_own(tmp_path, yaml_text, path, meant, fix):
    (tmp_path / "x.yaml").write_text(yaml_text)
    line = refused(envkit("validate", "x.yaml", cwd=tmp_path))
    assert line.startswith(f"envkit: error: x.yaml: {path}: ")
    assert line.endswith(f"(did you mean '{meant}'?) (fix: {fix})")


@pytest.mark.parametrize("override,shown,target", [
    ("training.learning_rate=1e-3", "lr", "training.lr"), ("bs=8", "training.batch_size", "training.batch_size"),
    ("epochs=2", "training.epochs", "training.epochs"), ("model.weight_decay=0.1", "training.weight_decay", "training.weight_decay"),
    ("training.max_iters=10", "max_steps", "training.max_steps")])
def test_set_gets_the_same_help_and_its_fix_is_a_set(tmp_path, override, shown, target):
    (tmp_path / "train.yaml").write_text(MLP)
    line = refused(envkit("validate", "train.yaml", "--set", override, cwd=tmp_path))
    assert line.startswith("envkit: error: --set")
    assert line.endswith(f"(did you mean '{shown}'?) (fix: --set {target}=VALUE)")


def test_a_misspelt_section_and_a_misspelt_key_keep_their_did_you_mean(tmp_path):
    (tmp_path / "a.yaml").write_text("trainig:\n  lr: 0.1\n")
    assert "unknown section 'trainig' (did you mean 'training'?)" in refused(envkit("validate", "a.yaml", cwd=tmp_path))
    (tmp_path / "b.yaml").write_text("training:\n  lrr: 0.1\n")
    assert "(did you mean 'lr'?) (fix: rename lrr to lr in section training)" in refused(envkit("validate", "b.yaml", cwd=tmp_path))


def test_every_alias_names_a_real_key_and_shadows_none():
    from envkit.config.coerce import aliases
    from envkit.config.schema import SCHEMA

    table = aliases()
    assert len(table) >= 40
    assert {a: t for a, t in table.items() if t.partition(".")[2] not in SCHEMA.get(t.partition(".")[0], {})} == {}
    # an alias is never a key of its own target's section (it would never be looked up there)
    assert [a for a, t in table.items() if a in SCHEMA[t.partition(".")[0]]] == []
