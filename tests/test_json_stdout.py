"""`--json` is a contract: stdout holds one JSON document and nothing else, whatever the trainer,
a sweep's runs or the user's own script print (their lines go to stderr and the run folder)."""

from __future__ import annotations

import json

from conftest import ROOT, envkit

QUICK = ["--set", "training.max_steps=6", "--set", "logging.every_steps=2", "--set", "eval.every_steps=6",
         "--set", "checkpoint.every_steps=6", "--profile", "cpu"]


def parse(res) -> dict:
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)  # fails on any line that is not part of the document


def test_run_json_is_json_alone_and_the_progress_goes_to_stderr(tmp_path):
    res = envkit("run", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--run-id", "j", "--json", *QUICK,
                 cwd=tmp_path, timeout=900)
    summary = parse(res)
    assert summary["status"] == "completed" and summary["steps"] == 6
    assert "step 2/6" in res.stderr  # the trainer's lines still reach the user


def test_sweep_json_is_json_alone(tmp_path):
    (tmp_path / "c.yaml").write_text((ROOT / "templates" / "train" / "gpt_quick_test.yaml").read_text()
                                     + "\nsweep:\n  grid:\n    experiment.seed: [1, 2]\n")
    out = parse(envkit("sweep", "c.yaml", "--json", *QUICK, cwd=tmp_path, timeout=900))
    assert sorted(r["status"] for r in out["runs"]) == ["completed", "completed"]


def test_exec_json_is_json_alone_whatever_the_script_prints(tmp_path):
    (tmp_path / "train.py").write_text("print('epoch 1 loss 0.5')\nprint('{not json')\n")
    res = envkit("exec", "--json", "--", "python", "train.py", cwd=tmp_path, timeout=300)
    out = parse(res)
    assert out["status"] == "completed" and out["run_dir"].startswith(str(tmp_path))
    assert "epoch 1 loss 0.5" in res.stderr  # the script's lines still reach the user


def test_runs_doctor_check_and_validate_json(tmp_path):
    envkit("run", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--run-id", "r", *QUICK, cwd=tmp_path, timeout=900)
    assert [r["status"] for r in parse(envkit("runs", "--json", cwd=tmp_path))] == ["completed"]
    res = envkit("doctor", "--json", "--no-runtime", cwd=tmp_path)
    assert res.returncode in (0, 1) and {"facts", "checks"} <= set(json.loads(res.stdout))  # 1: a check fails on this machine
    check = parse(envkit("check", "--json", "--require", "python>=3.8", cwd=tmp_path))
    assert check["ok"] is True and [r["requirement"] for r in check["results"]] == ["python>=3.8"]
    valid = parse(envkit("validate", str(ROOT / "templates" / "train" / "gpt_quick_test.yaml"), "--json", cwd=tmp_path))
    assert valid["config"]["model"]["type"] == "gpt"
