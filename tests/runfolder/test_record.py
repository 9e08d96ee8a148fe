"""What a run folder keeps for `envkit reproduce` (envkit/record/), part by part on real files, git
trees and interpreters, without training: the data fingerprint sees a changed byte in a 1 GiB file
(sparse: nothing is written to disk) and a rewritten file, and not a `touch` of a small one; the code
state keeps the patch and the small untracked sources and names what it leaves out; the lock of an
interpreter whose index is unreachable names the packages it has no hash for, and a second run
start takes it from the cache. training.deterministic: an op with no deterministic kernel stops the
run with one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import envkit
from localindex import refused_url


def _py(code: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=cwd, timeout=300, check=False)


def _fingerprint(path: Path) -> dict:
    r = _py(f"import json; from envkit.record.data import fingerprint; print(json.dumps(fingerprint({str(path)!r})))")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _differences(a: dict, b: dict) -> list[str]:
    r = _py(f"import json; from envkit.record.data import differences; print(json.dumps(differences({a!r}, {b!r})))")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_large_data_file_is_sampled_and_a_changed_block_or_rewrite_is_seen(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    big = tmp_path / "train.bin"
    with open(big, "wb") as fh:  # 1 GiB, sparse
        fh.truncate(1 << 30)
    before = _fingerprint(big)
    assert before["size"] == 1 << 30 and "sampled_sha256" in before["files"][0] and "sha256" not in before["files"][0]
    assert _differences(before, _fingerprint(big)) == []
    with open(big, "r+b") as fh:  # one byte inside the last sampled block
        fh.seek((1 << 30) - 10)
        fh.write(b"\x01")
    os.utime(big, ns=(before["files"][0]["mtime_ns"], before["files"][0]["mtime_ns"]))  # even with its old mtime
    assert _differences(before, _fingerprint(big)) == [f"dataset.path {big}: content changed (sampled blocks)"]
    os.utime(big, ns=(1, 1))
    with open(big, "r+b") as fh:  # back to the sampled content, but written again (a new mtime)
        fh.seek((1 << 30) - 10)
        fh.write(b"\x00")
    now = _fingerprint(big)
    assert _differences(before, now)[0].endswith("modified since (same size; a large file is sampled, so a new modification time counts)")


def test_a_small_data_file_is_hashed_whole_and_a_touch_is_no_change(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "tokens"
    folder.mkdir()
    (folder / "train.bin").write_bytes(b"\x01\x02" * 1000)
    (folder / "meta.json").write_text('{"vocab_size": 3}')
    before = _fingerprint(folder)
    assert before["kind"] == "folder" and all("sha256" in f for f in before["files"])
    os.utime(folder / "train.bin", ns=(5, 5))
    assert _differences(before, _fingerprint(folder)) == []
    (folder / "train.bin").write_bytes(b"\x01\x02" * 999 + b"\x01\x03")
    (folder / "val.bin").write_bytes(b"\x01")
    assert _differences(before, _fingerprint(folder)) == [f"dataset.path {folder}: val.bin is new",
                                                          f"dataset.path {folder}: train.bin: content changed (sha256)"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_code_state_keeps_the_patch_and_small_untracked_sources_and_names_the_rest(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text("print(1)\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "one")
    (repo / "train.py").write_text("print(2)\n")
    (repo / "model.py").write_text("W = 3\n")
    (repo / "weights.bin").write_bytes(b"\0" * 100)
    (repo / "big.txt").write_text("x" * (2 << 20))
    (repo / ".env").write_text("HF_TOKEN=hf_abc\n")
    (repo / "api_token.txt").write_text("abc\n")
    (repo / "runs" / "a" / "b").mkdir(parents=True)
    (repo / "runs" / "a" / "b" / "log.txt").write_text("a run's log\n")
    out = tmp_path / "code"
    r = _py("import json; from pathlib import Path; from envkit.record.code import code_state; "
            f"print(json.dumps(code_state(Path({str(repo)!r}), role='project', out_dir=Path({str(out)!r}), "
            f"exclude=[Path({str(repo / 'runs')!r})])))")
    assert r.returncode == 0, r.stderr
    state = json.loads(r.stdout)
    assert [u["path"] for u in state["untracked"]] == ["model.py"]
    assert {s["path"]: s["why"] for s in state["untracked_skipped"]} == {".env": "may hold secrets", "api_token.txt": "may hold secrets",
                                                                    "big.txt": "2,097,152 bytes, over 1 MiB", "weights.bin": "binary"}
    assert "-print(1)\n+print(2)" in (out / "project.patch").read_text()
    import tarfile

    with tarfile.open(out / "project-untracked.tar") as tar:
        assert tar.getnames() == ["model.py"]


def test_an_unreachable_index_leaves_hashes_missing_by_name_and_the_lock_is_cached(tmp_path):
    """The lock of this interpreter with pip pointed at a closed port: the run is not held up, every
    package from the index is named as missing, and the next run start takes it from the cache."""
    env = {"ENVKIT_CACHE_DIR": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
           "PIP_INDEX_URL": refused_url(), "PIP_EXTRA_INDEX_URL": ""}
    code = ("import json, sys; from envkit.record.envlock import environment_lock; "
            "l = environment_lock(sys.executable, device='cpu'); "
            "print(json.dumps({'missing': l.missing, 'cache': l.from_cache, 'unreachable': l.unreachable, 'text': l.text}))")
    # from an empty folder: a lock in the current folder or the managed environment's (README command 1
    # writes both into the checkout) would give torch its hash without any index
    env["ENVKIT_HOME"] = str(tmp_path / "no-managed-env")
    first = _py(code, env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    a = json.loads(first.stdout)
    assert "torch" in a["missing"] and "pytest" in a["missing"] and a["cache"] is False
    assert list(a["unreachable"]) == [env["PIP_INDEX_URL"]]
    assert 'missing-hashes = [' in a["text"] and '"torch"' in a["text"]
    b = json.loads(_py(code, env, cwd=tmp_path).stdout)
    assert b["cache"] is True and b["missing"] == a["missing"]


FACTORY = '''
import torch

class PutModel(torch.nn.Module):
    def __init__(self, input_dim, num_classes):
        super().__init__()
        self.lin = torch.nn.Linear(input_dim, num_classes)

    def forward(self, x):
        out = self.lin(x)
        scratch = torch.zeros(4)
        scratch.put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))  # no deterministic kernel (torch's docs)
        return out

def factory(input_dim, num_classes, **kw):
    return PutModel(input_dim, num_classes)
'''

DET = ("experiment: {{name: det}}\n"
       "dataset: {{type: synthetic, task: teacher, input_dim: 8, num_classes: 4, num_samples: 256}}\n"
       "model: {{type: {model}}}\n"
       "training: {{max_steps: 3, batch_size: 16, deterministic: {det}}}\n"
       "eval: {{every_steps: 0, batches: 1}}\n"
       "checkpoint: {{every_steps: 0}}\n"
       "device: {{type: cpu}}\n")


def test_an_op_without_a_deterministic_kernel_stops_a_deterministic_run_naming_it(tmp_path):
    (tmp_path / "putmodel.py").write_text(FACTORY)
    (tmp_path / "det.yaml").write_text(DET.format(model="'putmodel:factory'", det="true"))
    r = envkit("run", "det.yaml", "--profile", "cpu", "--run-id", "d", cwd=tmp_path, env={"ENVKIT_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("envkit: error:")]
    assert lines[0].startswith("envkit: error: training.deterministic: put_ has no deterministic kernel on this device"), r.stderr
    assert "Traceback" not in r.stderr
    (tmp_path / "det.yaml").write_text(DET.format(model="'putmodel:factory'", det="false"))
    r = envkit("run", "det.yaml", "--profile", "cpu", "--run-id", "n", cwd=tmp_path, env={"ENVKIT_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr[-2000:]
    log = (tmp_path / "runs" / "det" / "n" / "train.log").read_text()
    assert "deterministic algorithms on" not in log


def test_a_deterministic_run_says_so_and_records_it(tmp_path):
    (tmp_path / "det.yaml").write_text(DET.format(model="mlp", det="true"))
    r = envkit("run", "det.yaml", "--profile", "cpu", "--run-id", "d", cwd=tmp_path, env={"ENVKIT_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr[-2000:]
    run = tmp_path / "runs" / "det" / "d"
    assert "training.deterministic: deterministic algorithms on (cpu)" in (run / "train.log").read_text()
    rec = json.loads((run / "record.json").read_text())
    assert rec["determinism"] == {"deterministic": True}
    assert rec["config"]["config_hash"] == json.loads((run / "summary.json").read_text())["config_hash"]
