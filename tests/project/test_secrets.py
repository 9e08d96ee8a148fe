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
    # a copy outside any git tree: the template's own folder is this checkout, whose uncommitted changes
    # (this file's planted SEKRETs, while it is edited) would be the project's patch in the run's record
    (tmp_path / "train.yaml").write_text((ROOT / "templates" / "train" / "mlp_quick_test.yaml").read_text())
    res = envkit("run", "train.yaml", "--run-id", "r", "--profile", "cpu", "--json",
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
    path = tmp_path / "pylock.machine.toml"
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
    # --json: the error is a JSON object on stdout as well, as clean as the line
    assert res.returncode == 2 and json.loads(res.stdout)["exit_code"] == 2
    assert "https://127.0.0.1:9/simple" in json.loads(res.stdout)["error"]["message"]
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
    record.write(tmp_path / "pylock.machine.toml", lock)
    assert read(tmp_path / "pylock.machine.toml").index_urls == ["https://mirror.invalid/simple"]  # every password gone, one index left
    write_state(tmp_path / "env", index_url=urls[-1], index_urls=urls)
    no_sekret(files=[tmp_path / "pylock.machine.toml", *(tmp_path / "env").iterdir()])


@pytest.mark.parametrize("key", ["quote", "space", "all"])
def test_a_download_error_names_the_index_without_any_password(tmp_path, key):
    res = envkit("setup", "--dry-run", "--json", "--index-url", f"https://bob:{ODD[key]}@127.0.0.1:9/simple",
                 "--venv", str(tmp_path / "v"), env={"ENVKIT_INDEX_TIMEOUT": "1"}, cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "the package index https://127.0.0.1:9/simple" in res.stderr, res.stderr
    no_sekret(res.stdout, res.stderr)


def recorded_files(run: Path) -> list[Path]:
    """Every file of a run folder once its record is whole: an exec run's record (record.json,
    pylock.toml, code/) is written by a process of its own after `envkit exec` returns, and a secret
    it let through would land after a scan made at once."""
    from processes import wait_for

    assert wait_for(lambda: (run / "record.json").is_file() and not (run / ".record-pending.json").exists(), seconds=300)
    return [p for p in run.rglob("*") if p.is_file()]


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
    written = recorded_files(run)
    assert {p.name for p in written} >= {"config.json", "environment.json", "train.log", "summary.json", "record.json", "pylock.toml"}
    no_sekret(res.stdout, res.stderr, files=written)


def test_run_records_no_password_with_any_character(tmp_path):
    # a copy outside any git tree: the template's own folder is this checkout, whose uncommitted changes
    # (this file's planted SEKRETs, while it is edited) would be the project's patch in the run's record
    (tmp_path / "train.yaml").write_text((ROOT / "templates" / "train" / "mlp_quick_test.yaml").read_text())
    res = envkit("run", "train.yaml", "--run-id", "r", "--profile", "cpu",
                 "--set", "training.max_steps=2", "--set", "eval.every_steps=0", "--set", "checkpoint.every_steps=2",
                 env=_odd_env(ODD["all"]), cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    run_dir = tmp_path / "runs" / "mlp-quick-test" / "r"
    env = json.loads((run_dir / "environment.json").read_text())["environ"]
    assert env["PIP_INDEX_URL"] == "https://mirror.invalid/simple" and env["HTTPS_PROXY"] == "http://proxy.invalid:3128"
    no_sekret(res.stdout, res.stderr, files=recorded_files(run_dir))


# ---------------------------------------------------------------- secrets by the shape of an argument
# (what a user passes to a script that calls an API: a header for curl or requests, a JSON config)
SHAPED_ARGS = ["Authorization: Bearer SEKRET1", "--header=X-Api-Key:SEKRET2", "-H", "X-Api-Key: SEKRET3",
               '{"token": "SEKRET4", "nested": {"password": "SEKRET5"}}', "--header=Accept: text/html",
               '{"tokens_per_step": 4096, "max_tokens": 8}', "--max-new-tokens", "256"]


def test_exec_records_no_secret_found_by_its_shape(tmp_path):
    """An Authorization header, an X-Api-Key header as --header=V and as -H V, and a JSON argument
    with secret keys (one nested): none of the secrets lands in any file of the run folder or in
    what envkit printed, while the command stays readable: the header names, the auth scheme, the
    JSON's keys, a header and keys that are no secret (max_tokens is a count) kept whole."""
    import os
    import sys

    (tmp_path / "show.py").write_text("import json, sys\njson.dump(sys.argv[1:], open(sys.argv[0] + '.args', 'w'))\n")
    env = {"ENVKIT_HOME": str(tmp_path / "no-managed-env"), "ENVKIT_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    res = envkit("exec", "--profile", "cpu", "--", "python", "show.py", *SHAPED_ARGS, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "show.py.args").read_text()) == SHAPED_ARGS  # the command got them whole
    run = next((tmp_path / "runs" / "show").iterdir())
    recorded = ["python", "show.py", "Authorization: Bearer ***", "--header=X-Api-Key:***", "-H", "X-Api-Key: ***",
                '{"token": "***", "nested": {"password": "***"}}', "--header=Accept: text/html",
                '{"tokens_per_step": 4096, "max_tokens": 8}', "--max-new-tokens", "256"]
    assert json.loads((run / "config.json").read_text())["command"] == recorded
    environment = json.loads((run / "environment.json").read_text())
    assert environment["command"] == recorded and environment["argv"][-len(recorded):] == recorded
    assert f"attempt 1/1: {' '.join(recorded)}" in (run / "train.log").read_text()
    written = recorded_files(run)
    assert {p.name for p in written} >= {"config.json", "environment.json", "train.log", "summary.json", "record.json", "pylock.toml"}
    no_sekret(res.stdout, res.stderr, files=written)


@pytest.mark.parametrize("arg, recorded", [
    # HTTP headers: the name and the authentication scheme stay, the credentials go
    ("Authorization: Bearer eyJhbGciOi.x.y", "Authorization: Bearer ***"),
    ("Authorization:Basic dXNlcjpwdw==", "Authorization:Basic ***"),
    ("Proxy-Authorization: Negotiate YIIB", "Proxy-Authorization: Negotiate ***"),
    ("authorization: token ghp_abc", "authorization: token ***"),
    ("Cookie: session=abc; theme=dark", "Cookie: ***"),
    ("X-Api-Key: k1", "X-Api-Key: ***"),
    ("Private-Token: glpat-x", "Private-Token: ***"),
    ("X-Amz-Security-Token: FQo", "X-Amz-Security-Token: ***"),
    ("Bearer eyJhbGciOiJIUzI1NiJ9", "Bearer ***"),  # the credential alone, as a header carries it
    # JSON and YAML flow collections: the values of secret keys, whatever they hold, nested too
    ('{"token": "t", "nested": {"password": "p"}, "lr": 0.1}', '{"token": "***", "nested": {"password": "***"}, "lr": 0.1}'),
    ('{"api_key": 12345}', '{"api_key": "***"}'),  # still JSON
    ('{"auth": {"user": "a", "pass": "b"}}', '{"auth": "***"}'),  # a secret key's whole object
    ('[{"headers": {"Authorization": "Bearer x"}}]', '[{"headers": {"Authorization": "***"}}]'),
    ('["Authorization: Basic dXNlcjpwdw==", "https://u:pw@h/x"]', '["Authorization: Basic ***", "https://h/x"]'),
    ("{token: t, nested: {hf_token: h}, steps: 3}", "{token: ***, nested: {hf_token: ***}, steps: 3}"),
    ("{'password': 'it''s', 'user': 'me'}", "{'password': '***', 'user': 'me'}"),
    ('{"token": "t", "broken"', '{"token": "***", "broken"'),  # not JSON: the quoted key still found
    # code and YAML lines
    ('login(token="t"); get(u, headers={"X-Api-Key": "k"})', 'login(token="***"); get(u, headers={"X-Api-Key": "***"})'),
    ("lr: 0.1\nhf_token: h\n  password: p", "lr: 0.1\nhf_token: ***\n  password: ***"),
])
def test_an_argument_loses_its_secrets_by_shape(arg, recorded):
    from envkit.redact import redact_argv

    assert redact_argv(["python", "t.py", arg]) == ["python", "t.py", recorded]


@pytest.mark.parametrize("argv, recorded", [
    (["-H", "X-Api-Key: k"], ["-H", "X-Api-Key: ***"]),
    (["--header", "Authorization: Bearer abc"], ["--header", "Authorization: Bearer ***"]),
    (["-HX-Api-Key: k"], ["-HX-Api-Key: ***"]),  # curl's attached form
    (["--header=Cookie: a=b"], ["--header=Cookie: ***"]),
    (["--config={\"secret\": \"s\"}"], ["--config={\"secret\": \"***\"}"]),
    (["cfg={token: t}"], ["cfg={token: ***}"]),
    (["--token", "t", "--hf-token=h", "WANDB_API_KEY=w"], ["--token", "***", "--hf-token=***", "WANDB_API_KEY=***"]),
])
def test_flag_values_lose_their_secrets(argv, recorded):
    from envkit.redact import redact_argv

    assert redact_argv(argv) == recorded


@pytest.mark.parametrize("arg", [
    "Accept: text/html", "--header=Content-Type: application/json", "-HUser-Agent: envkit",
    '{"tokens_per_step": 4096, "max_tokens": 8, "num_tokens": 1, "tokenizer": "gpt2"}',  # counts and names, no credential
    '{"monkey": 1, "keyboard": "us", "keep_last": 3}',  # KEY inside a word is no key
    "--max-new-tokens=256", "training.max_tokens=100", "monkey: 1", "--monkey-patch=yes",
    "Key insight: one line", "Bearer with me", "Basic setup", "https://host/path?page=2", "cuda:0",
    "{not json, just: text", '["a", "b"]',
])
def test_what_is_no_secret_is_recorded_as_written(arg):
    from envkit.redact import redact_argv

    assert redact_argv(["python", "t.py", arg]) == ["python", "t.py", arg]
