"""No secret is written: every writer of envkit is run with planted credentials (a password in
PIP_INDEX_URL, HTTPS_PROXY and DATABASE_URL, a token in HF_TOKEN), then every file it wrote and
everything it printed is searched for them (envkit/redact.py holds the rules)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, envkit
from envkit.errors import EnvkitError
from envkit.install.lock import record, single
from envkit.install.lock.read import read
from envkit.redact import recorded_env, strip_userinfo

PLANTED = {
    "PIP_INDEX_URL": "https://bob:PASSWORD1@mirror.invalid/simple",
    "HTTPS_PROXY": "http://u:PASSWORD2@proxy.invalid:3128",
    "DATABASE_URL": "postgres://me:PASSWORD3@db.invalid/x",
    "HF_TOKEN": "tok_PLANTED",
    "PYTORCH_KEEP_ME": "https://alice:PASSWORD4@example.invalid/data?access_token=PASSWORD5&x=1",
}
NEEDLES = ("PASSWORD1", "PASSWORD2", "PASSWORD3", "PASSWORD4", "PASSWORD5", "tok_PLANTED")


def assert_clean(*texts: str, files: list[Path] = ()):
    for f in files:
        texts += (f.read_text(errors="replace"),)
    for i, text in enumerate(texts):
        for needle in NEEDLES:
            assert needle not in text, f"{needle} leaked into {(list(files) + ['output'] * len(texts))[i]}"


@pytest.mark.parametrize("url, expected", [
    ("https://bob:pw@mirror/simple", "https://mirror/simple"),
    ("socks5h://a:b@c@proxy:1080", "socks5h://proxy:1080"),  # a raw '@' in the password
    ("git+https://ghp_x@github.com/o/r.git", "git+https://github.com/o/r.git"),  # user only
    ("redis://:pw@r:6379/0 and postgres://me:pw@db/x", "redis://r:6379/0 and postgres://db/x"),
    ("u:pw@proxy:3128", "proxy:3128"),  # a proxy without a scheme
    ("me@example.com", "me@example.com"),  # not a URL: untouched
    ("https://h/p?a=1&api_key=zz#f", "https://h/p?a=1&api_key=***#f"),
    # passwords pasted unencoded: '/', '#', '?' and '@' inside them
    ("https://u:p/w@host/x", "https://host/x"),
    ("https://u:p#w@host/x", "https://host/x"),
    ("https://u:p?w@host:8080/x", "https://host:8080/x"),
    ("https://u:p/w@x@host/y", "https://host/y"),
    ("pip install --index-url https://u:a/b#c@idx.example/simple torch", "pip install --index-url https://idx.example/simple torch"),
    ("https://u:p%40w%2F@host", "https://host"),  # encoded
    ("https://u:p@[::1]:8080/x", "https://[::1]:8080/x"),
    # an '@' that is no userinfo stays
    ("https://registry.npmjs.org/@babel/core", "https://registry.npmjs.org/@babel/core"),
    ("http://localhost:4873/@babel/core", "http://localhost:4873/@babel/core"),
    ("https://u:pw@h/p?email=a@b.com", "https://h/p?email=a@b.com"),
    ("https://host/page#me@x.com", "https://host/page#me@x.com"),
])
def test_urls_lose_their_credentials(url, expected):
    assert strip_userinfo(url) == expected


def test_only_allow_listed_variables_are_recorded():
    env = recorded_env({**PLANTED, "HOME": "/home/x", "OMP_NUM_THREADS": "4", "NCCL_SOCKET_IFNAME": "eth0",
                        "PIP_PASSWORD": "x", "AWS_SECRET_ACCESS_KEY": "y"})
    assert env == {"HTTPS_PROXY": "http://proxy.invalid:3128", "NCCL_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "4",
                   "PIP_INDEX_URL": "https://mirror.invalid/simple",
                   "PYTORCH_KEEP_ME": "https://example.invalid/data?access_token=***&x=1"}


def test_doctor_record_and_json_and_check_json(tmp_path):
    snap = tmp_path / "snap.json"
    rec = envkit("doctor", "--record", str(snap), "--no-runtime", env=PLANTED, cwd=tmp_path)
    assert rec.returncode in (0, 1), rec.stderr
    data = json.loads(snap.read_text())
    assert data["env"]["PIP_INDEX_URL"] == "https://mirror.invalid/simple" and "DATABASE_URL" not in data["env"]
    as_json = envkit("doctor", "--json", "--no-runtime", env=PLANTED, cwd=tmp_path)
    assert json.loads(as_json.stdout)["facts"]["env"]["HTTPS_PROXY"] == "http://proxy.invalid:3128"
    check = envkit("check", "--json", "--require", "python>=3.8", env=PLANTED, cwd=tmp_path)
    assert json.loads(check.stdout)["ok"] is True
    # a snapshot recorded by an older envkit (values as they were) is cleaned when replayed
    old = json.loads(snap.read_text())
    old["env"].update(PLANTED)
    (tmp_path / "old.json").write_text(json.dumps(old))
    replay = envkit("doctor", "--json", "--replay", str(tmp_path / "old.json"), cwd=tmp_path)
    assert replay.returncode in (0, 1), replay.stderr
    replayed_env = json.loads(replay.stdout)["facts"]["env"]
    assert replayed_env["PIP_INDEX_URL"] == "https://mirror.invalid/simple"
    assert replayed_env["PYTORCH_KEEP_ME"] == "https://example.invalid/data?access_token=***&x=1"
    assert "HF_TOKEN" not in replayed_env and "DATABASE_URL" not in replayed_env
    assert_clean(rec.stdout, rec.stderr, as_json.stdout, as_json.stderr, check.stdout, check.stderr,
                 replay.stdout, replay.stderr, files=[snap])


def test_envkit_run_writes_no_secret(tmp_path):
    res = envkit("run", str(ROOT / "templates" / "train" / "mlp_quick_test.yaml"), "--run-id", "r", "--profile", "cpu", "--json",
                 "--set", "training.max_steps=4", "--set", "eval.every_steps=2", "--set", "checkpoint.every_steps=2",
                 "--set", "logging.every_steps=1", env={**PLANTED, "MY_API_TOKEN": "tok_PLANTED", "HARMLESS_VAR": "ok"},
                 cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    run_dir = tmp_path / "runs" / "mlp-quick-test" / "r"
    written = [p for p in run_dir.rglob("*") if p.is_file() and p.suffix != ".pt"]
    assert {p.name for p in written} >= {"environment.json", "config.json", "train.log", "metrics.jsonl", "summary.json"}
    env = json.loads((run_dir / "environment.json").read_text())["environ"]
    assert env["PIP_INDEX_URL"] == "https://mirror.invalid/simple" and env["HTTPS_PROXY"] == "http://proxy.invalid:3128"
    assert "HARMLESS_VAR" not in env and "DATABASE_URL" not in env and "HF_TOKEN" not in env  # the allow-list
    assert_clean(res.stdout, res.stderr, files=written)


def test_lock_holds_no_credentials(tmp_path):
    lock = single.doc(platform={"system": "Linux"}, profile={"name": "cpu"},
                      source={"torch": "stable", "index_urls": [PLANTED["PIP_INDEX_URL"]]},
                      env={"PYTORCH_X": "1", "HF_TOKEN": PLANTED["HF_TOKEN"], "HTTPS_PROXY": PLANTED["HTTPS_PROXY"]},
                      entries=[{"name": "torch", "version": "2.13.0", "sha256": "0" * 64,
                                "url": "https://bob:PASSWORD1@mirror.invalid/torch-2.13.0-py3-none-any.whl"}],
                      envkit_version="0.1.0")
    path = tmp_path / "envkit.lock"
    record.write(path, lock)
    assert "https://mirror.invalid/torch-2.13.0-py3-none-any.whl" in path.read_text()  # the wheel is kept, its password not
    back = read(path)
    assert back.index_urls == ["https://mirror.invalid/simple"] and back.env == {"PYTORCH_X": "1", "HTTPS_PROXY": "http://proxy.invalid:3128"}
    assert_clean(files=[path])


def test_error_lines_name_urls_without_credentials(tmp_path):
    line = EnvkitError(f"cannot reach the package index {PLANTED['PIP_INDEX_URL']}", fix="check it").one_line()
    assert "https://mirror.invalid/simple" in line
    res = envkit("setup", "--dry-run", "--json", "--index-url", "https://bob:PASSWORD1@127.0.0.1:9/simple",
                 "--venv", str(tmp_path / "v"), env={"ENVKIT_INDEX_TIMEOUT": "1"}, cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]  # one line, no traceback
    assert "cannot reach the package index https://127.0.0.1:9/simple" in res.stderr
    assert_clean(line, res.stdout, res.stderr)
