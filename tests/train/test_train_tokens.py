"""The `tokens` dataset (nanoGPT / llm.c train.bin + val.bin) for real on CPU: files written with
numpy train a GPT, a stopped run resumes bit for bit, and each bad folder is one line naming the
file with exit code 2."""

from __future__ import annotations

import json

import pytest

from conftest import envkit

np = pytest.importorskip("numpy")

VOCAB = 64
CONFIG = """\
experiment: {name: tok}
dataset: {type: tokens, path: data}
model: {type: gpt, n_layer: 1, n_head: 2, n_embd: 32, block_size: 16, dropout: 0.1}
training: {max_steps: 60, batch_size: 8, lr: 0.01, warmup_steps: 5}
eval: {every_steps: 30, batches: 4}
checkpoint: {every_steps: 7}
logging: {every_steps: 1, progress: none}
"""


def write_folder(folder, n_train=20_000, n_val=2_000, dtype="uint16", meta=True):
    """A learnable stream: each token is the previous one + 7 (mod 61), with a rare random jump."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in (("train.bin", n_train), ("val.bin", n_val)):
        steps = np.where(rng.random(n) < 0.02, rng.integers(0, 61, n), 7)
        ids = np.cumsum(steps) % 61
        ids.astype(dtype).tofile(folder / name)
    if meta:
        (folder / "meta.json").write_text(json.dumps({"vocab_size": VOCAB}))
    return folder


def project(tmp_path, **kw):
    write_folder(tmp_path / "data", **kw)
    (tmp_path / "train.yaml").write_text(CONFIG)
    return tmp_path / "train.yaml"


def run(tmp_path, *args, run_id="r"):
    return envkit("run", str(tmp_path / "train.yaml"), "--profile", "cpu", "--run-id", run_id, *args, cwd=tmp_path, timeout=400)


def losses(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


@pytest.fixture(scope="module")
def two_folders(tmp_path_factory):
    """The same token stream twice: "straight" trains it from uint16 files (vocabulary from
    meta.json) read through DataLoader workers (the memory map reopened in each); "stopped" from
    uint32 files without meta.json (vocabulary from the config), in-process, stopped after step 10
    and resumed. Trained once for the two tests: (project folder of straight, of stopped)."""
    a, b = tmp_path_factory.mktemp("uint16"), tmp_path_factory.mktemp("uint32")
    project(a)
    res = run(a, "--set", "dataloader.num_workers=2", run_id="straight")
    assert res.returncode == 0, res.stderr[-2000:]
    project(b, dtype="uint32", meta=False)
    uint32 = ["--set", "dataset.dtype=uint32", "--set", f"dataset.vocab_size={VOCAB}"]
    first = run(b, *uint32, "--stop-after", "10", run_id="stopped")
    assert first.returncode == 0, first.stderr[-2000:]
    again = run(b, *uint32, run_id="stopped")
    assert again.returncode == 0, again.stderr[-2000:]
    return a, b


def test_tokens_folder_trains_and_resumes_bit_exactly(two_folders):
    d = two_folders[0] / "runs" / "tok"
    s = json.loads((d / "straight" / "summary.json").read_text())
    assert s["status"] == "completed" and s["tokens_per_second"] > 0
    assert s["best_val_loss"] < 0.5 * s["baseline_loss"], s  # it learned the +7 rule (unigram ~ln 61)
    assert "train.bin 20,000 and val.bin 2,000 uint16 tokens" in (d / "straight" / "train.log").read_text()

    # the same batches whether read through workers or in-process, through a stop and a resume
    a, b = losses(d / "straight"), losses(two_folders[1] / "runs" / "tok" / "stopped")
    assert [s for s, _ in a] == list(range(1, 61)) == [s for s, _ in b]
    assert a == b  # bit for bit
    assert json.loads((two_folders[1] / "runs" / "tok" / "stopped" / "summary.json").read_text())["resumed_from"] == "step_00000010.pt"


def test_uint32_and_vocab_from_the_config(two_folders):
    d = two_folders[1] / "runs" / "tok" / "stopped"
    assert "train.bin 20,000 and val.bin 2,000 uint32 tokens" in (d / "train.log").read_text()
    assert f"vocabulary {VOCAB} from dataset.vocab_size" in (d / "train.log").read_text()
    # the uint32 files hold the uint16 run's tokens: read right, the same losses to the last bit
    assert losses(d) == losses(two_folders[0] / "runs" / "tok" / "straight")


def one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    errors = [line for line in res.stderr.splitlines() if line.startswith("envkit: error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    for n in needles:
        assert n in errors[0], errors[0]
    return errors[0]


def test_bad_folders_are_one_line_naming_the_file(tmp_path):
    cfg = project(tmp_path)
    data = tmp_path / "data"
    assert envkit("validate", str(cfg), "--profile", "cpu", cwd=tmp_path).returncode == 0

    (data / "val.bin").rename(data / "val.keep")
    one_line_error(envkit("validate", str(cfg), "--profile", "cpu", cwd=tmp_path), str(data / "val.bin"), "missing")
    (data / "val.keep").rename(data / "val.bin")

    with open(data / "train.bin", "ab") as f:
        f.write(b"\x01")  # 40,001 bytes: not whole uint16 tokens
    one_line_error(envkit("validate", str(cfg), "--profile", "cpu", cwd=tmp_path), str(data / "train.bin"),
                   "not a multiple of 2", "dataset.dtype")
    one_line_error(envkit("run", str(cfg), "--profile", "cpu", cwd=tmp_path), str(data / "train.bin"))

    write_folder(data, n_val=100)  # fewer than one batch of 8 x 17 tokens
    one_line_error(envkit("validate", str(cfg), "--profile", "cpu", cwd=tmp_path), str(data / "val.bin"), "fewer than one batch")

    write_folder(data, meta=False)
    (data / "meta.json").unlink()
    (data / "meta.pkl").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")  # a pickle that would run a command
    line = one_line_error(envkit("validate", str(cfg), "--profile", "cpu", cwd=tmp_path), str(data / "meta.json"),
                          "never unpickled", "dataset.vocab_size")
    assert "pwned" not in line


def test_a_token_id_beyond_the_vocabulary_stops_the_run_in_one_line(tmp_path):
    cfg = project(tmp_path)
    ids = np.fromfile(tmp_path / "data" / "train.bin", dtype=np.uint16)
    ids[::10] = VOCAB + 5  # in every window of 17 tokens
    ids.tofile(tmp_path / "data" / "train.bin")
    res = envkit("run", str(cfg), "--profile", "cpu", "--set", "dataloader.num_workers=1", cwd=tmp_path)
    one_line_error(res, str(tmp_path / "data" / "train.bin"), f"token id {VOCAB + 5}", "vocabulary size 64")
