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


# ---------------------------------------------------------------- any character, any form
# Each password holds a character that ends a URL in a pattern (a quote, a space, '<', '#', '/',
# '@', a percent-escape), with the marker SEKRET on both sides of it: a redaction that stops at the
# character leaves the second half, and the search for "SEKRET" finds it.
ODD = {"quote": "SEKRETa'SEKRETb", "dquote": 'SEKRETa"SEKRETb', "space": "SEKRETa SEKRETb", "lt": "SEKRETa<SEKRETb",
       "hash": "SEKRETa#SEKRETb", "slash": "SEKRETa/SEKRETb", "at": "SEKRETa@SEKRETb", "pct": "SEKRETa%40%2FSEKRETb",
       "all": "SEKa'b\"c d<e#f/g@h%27SEKRETz"}


def no_sekret(*texts: str, files=()):
    for f in files:
        text = Path(f).read_bytes().decode("utf-8", "replace")
        assert "SEKRET" not in text and "SEKa" not in text, f"a password leaked into {f}"
    for text in texts:
        assert "SEKRET" not in text and "SEKa" not in text, text


@pytest.mark.parametrize("pw", ODD.values(), ids=ODD.keys())
def test_a_password_with_any_character_is_stripped_wherever_it_stands(pw):
    url = f"https://bob:{pw}@mirror.invalid/simple"
    assert strip_userinfo(url) == "https://mirror.invalid/simple"
    assert strip_userinfo(f"pip install --index-url {url} torch") == "pip install --index-url https://mirror.invalid/simple torch"
    assert strip_userinfo(f"index = {json.dumps(url)}") == 'index = "https://mirror.invalid/simple"'
    assert strip_userinfo(f"cannot reach {url}: timed out") == "cannot reach https://mirror.invalid/simple: timed out"
    assert strip_userinfo(f"http://u:{pw}@proxy.invalid:3128") == "http://proxy.invalid:3128"
    assert strip_userinfo(f"u:{pw}@proxy.invalid:3128") == "proxy.invalid:3128"


def _odd_env(pw: str) -> dict:
    return {"PIP_INDEX_URL": f"https://bob:{pw}@mirror.invalid/simple", "UV_EXTRA_INDEX_URL": f"https://x:{pw}@extra.invalid/simple",
            "HTTPS_PROXY": f"http://u:{pw}@proxy.invalid:3128", "PIP_EXTRA_INDEX_URL": f"https://bob:{pw}@m2.invalid/simple"}


@pytest.mark.parametrize("key", ["quote", "space", "lt", "all"])
def test_doctor_record_and_json_strip_any_password(tmp_path, key):
    env = _odd_env(ODD[key])
    snap = tmp_path / "snap.json"
    rec = envkit("doctor", "--record", str(snap), "--no-runtime", env=env, cwd=tmp_path)
    assert rec.returncode in (0, 1), rec.stderr
    data = json.loads(snap.read_text())
    assert data["env"]["PIP_INDEX_URL"] == "https://mirror.invalid/simple"
    assert data["env"]["UV_EXTRA_INDEX_URL"] == "https://extra.invalid/simple"
    as_json = envkit("doctor", "--json", "--no-runtime", env=env, cwd=tmp_path)
    assert json.loads(as_json.stdout)["facts"]["env"]["HTTPS_PROXY"] == "http://proxy.invalid:3128"
    no_sekret(rec.stdout, rec.stderr, as_json.stdout, as_json.stderr, files=[snap])


def test_lock_and_state_strip_any_password(tmp_path):
    from envkit.install.setup.managed import write_state

    urls = [f"https://bob:{pw}@mirror.invalid/simple" for pw in ODD.values()]
    lock = single.doc(platform={"system": "Linux"}, profile={"name": "cpu"}, source={"torch": "stable", "index_urls": urls},
                      env={"HTTPS_PROXY": f"http://u:{ODD['all']}@proxy.invalid:3128"},
                      entries=[{"name": "torch", "version": "2.13.0", "sha256": "0" * 64,
                                "url": f"https://bob:{ODD['all']}@mirror.invalid/torch-2.13.0-py3-none-any.whl"}],
                      envkit_version="0.1.0")
    record.write(tmp_path / "envkit.lock", lock)
    assert read(tmp_path / "envkit.lock").index_urls == ["https://mirror.invalid/simple"]  # every password gone, one index left
    write_state(tmp_path / "env", index_url=urls[-1], index_urls=urls)
    no_sekret(files=[tmp_path / "envkit.lock", *(tmp_path / "env").iterdir()])


@pytest.mark.parametrize("key", ["quote", "space", "all"])
def test_a_download_error_names_the_index_without_any_password(tmp_path, key):
    res = envkit("setup", "--dry-run", "--json", "--index-url", f"https://bob:{ODD[key]}@127.0.0.1:9/simple",
                 "--venv", str(tmp_path / "v"), env={"ENVKIT_INDEX_TIMEOUT": "1"}, cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "the package index https://127.0.0.1:9/simple" in res.stderr, res.stderr
    no_sekret(res.stdout, res.stderr)


SECRET_ARGS = ["--hf-token", "SEKRET21", "--token=SEKRET22", "--password", "SEKRET23", "--api-key", "SEKRET24",
               "--wandb-key", "SEKRET25", "--secret", "SEKRET26", "HF_TOKEN=SEKRET27", "wandb.api_key=SEKRET28",
               "--index-url", f"https://u:{ODD['all']}@idx.invalid/simple"]


def test_exec_records_no_secret_argument_or_password(tmp_path):
    import os
    import sys

    (tmp_path / "show.py").write_text("import json, sys\njson.dump(sys.argv[1:], open(sys.argv[0] + '.args', 'w'))\nprint('ok')\n")
    env = {**_odd_env(ODD["all"]), "ENVKIT_HOME": str(tmp_path / "no-managed-env"), "ENVKIT_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    res = envkit("exec", "--profile", "cpu", "--", "python", "show.py", *SECRET_ARGS, "--lr", "0.1", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "show.py.args").read_text()) == [*SECRET_ARGS, "--lr", "0.1"]  # the command got them whole
    run = next((tmp_path / "runs" / "show").iterdir())
    config = json.loads((run / "config.json").read_text())
    assert config["command"] == ["python", "show.py", "--hf-token", "***", "--token=***", "--password", "***", "--api-key", "***",
                                 "--wandb-key", "***", "--secret", "***", "HF_TOKEN=***", "wandb.api_key=***",
                                 "--index-url", "https://idx.invalid/simple", "--lr", "0.1"]
    written = [p for p in run.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"config.json", "environment.json", "train.log", "summary.json"}
    no_sekret(res.stdout, res.stderr, files=written)


def test_run_records_no_password_with_any_character(tmp_path):
    res = envkit("run", str(ROOT / "templates" / "train" / "mlp_quick_test.yaml"), "--run-id", "r", "--profile", "cpu",
                 "--set", "training.max_steps=2", "--set", "eval.every_steps=0", "--set", "checkpoint.every_steps=2",
                 env=_odd_env(ODD["all"]), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    run_dir = tmp_path / "runs" / "mlp-quick-test" / "r"
    env = json.loads((run_dir / "environment.json").read_text())["environ"]
    assert env["PIP_INDEX_URL"] == "https://mirror.invalid/simple" and env["HTTPS_PROXY"] == "http://proxy.invalid:3128"
    no_sekret(res.stdout, res.stderr, files=[p for p in run_dir.rglob("*") if p.is_file()])
