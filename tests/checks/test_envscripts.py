"""Env scripts, sourced in real shells: values set, hostile values inert, deactivate restores,
the managed venv activated, edited files kept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SNAPSHOTS, envkit

HOSTILE = {
    "ENVKIT_T_CMD": "$(touch pwned)",
    "ENVKIT_T_TICKS": "`touch pwned`",
    "ENVKIT_T_QUOTES": "it's \"quoted\" \\ back; $HOME & | > out",
    "ENVKIT_T_SPACES": "  two  spaces  ",
    "ENVKIT_T_EMPTY": "",
}
DUMP = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"


def hostile_profile(config: Path) -> None:
    lines = ['extends = "cpu"', 'description = "test profile with hostile values"', "[env]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in HOSTILE.items()]
    (config / "profiles").mkdir(parents=True, exist_ok=True)
    (config / "profiles" / "hostile.toml").write_text("\n".join(lines) + "\n")


@pytest.fixture
def setup(tmp_path, monkeypatch):
    cfg = tmp_path / "config"
    work = tmp_path / "work"
    work.mkdir()
    hostile_profile(cfg)
    monkeypatch.setenv("ENVKIT_CONFIG_DIR", str(cfg))
    monkeypatch.chdir(work)
    return {"work": work, "env": {"ENVKIT_CONFIG_DIR": str(cfg)}}


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_", "_ENVKIT", "OMP_", "VIRTUAL_ENV"))}
    env.pop("PYTHONUNBUFFERED", None)
    env.update(extra)
    return env


def run_shell(shell: str, script: str, cwd: Path, env: dict) -> list[dict]:
    """Run `script` in `shell`; every line printing JSON of os.environ becomes one dict."""
    args = {"bash": ["bash", "--norc", "--noprofile", "-c", script], "zsh": ["zsh", "-f", "-c", script],
            "fish": ["fish", "--no-config", "-c", script]}[shell]
    out = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def check_activation(shell: str, setup, src: str, deact: str = "deactivate_envkit"):
    work = setup["work"]
    r = envkit("env", "--profile", "hostile", "--write", str(work / ".envkit"), env=setup["env"], cwd=work)
    assert r.returncode == 0, r.stderr
    env = clean_env(OMP_NUM_THREADS="7", ENVKIT_T_SPACES="before")
    before, during, after, again = run_shell(shell, f"{DUMP}; {src}; {DUMP}; {deact}; {DUMP}; {src}; {src}; {DUMP}", work, env)
    for k, v in HOSTILE.items():
        assert during[k] == v, (shell, k, during.get(k))
    assert during["PYTHONUNBUFFERED"] == "1" and during["OMP_NUM_THREADS"].isdigit() and during["OMP_NUM_THREADS"] != "7"
    assert not (work / "pwned").exists() and not (work / "out").exists()
    # deactivate: every variable back as it was, unset ones unset again
    assert after["OMP_NUM_THREADS"] == "7" and after["ENVKIT_T_SPACES"] == "before"
    for k in ("PYTHONUNBUFFERED", "ENVKIT_T_CMD", "ENVKIT_T_QUOTES", "ENVKIT_T_EMPTY", "_ENVKIT_PROFILE"):
        assert k not in after, (shell, k)
    assert {k: v for k, v in after.items() if not k.startswith("_")} == {k: v for k, v in before.items() if not k.startswith("_")}
    # sourcing twice in a row still keeps the first "before" values
    assert again["ENVKIT_T_CMD"] == HOSTILE["ENVKIT_T_CMD"]


def test_bash_activate_sets_restores_and_keeps_hostile_values_inert(setup):
    check_activation("bash", setup, ". .envkit/activate")


def test_bash_deactivate_restores_after_double_activation(setup):
    """Sourcing activate twice must not make the second call save the first one's values as the
    user's: one deactivate brings back what the shell had before either."""
    work = setup["work"]
    res = envkit("env", "--profile", "hostile", "--write", ".envkit", env=setup["env"], cwd=work)
    assert res.returncode == 0, res.stderr
    (during, after) = run_shell("bash", f"set -e; . .envkit/activate; . .envkit/activate; {DUMP}; deactivate_envkit; {DUMP}",
                                work, clean_env(OMP_NUM_THREADS="7"))
    assert during["ENVKIT_T_CMD"] == HOSTILE["ENVKIT_T_CMD"] and during["OMP_NUM_THREADS"] != "7"
    assert after["OMP_NUM_THREADS"] == "7" and "ENVKIT_T_CMD" not in after and "_ENVKIT_PROFILE" not in after


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_activate(setup):
    check_activation("zsh", setup, ". .envkit/activate")


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed")
def test_fish_activate(setup):
    check_activation("fish", setup, "source .envkit/activate.fish")


def test_eval_envkit_env_gives_the_cpu_profile_on_this_machine(setup):
    work = setup["work"]
    exe = f"{sys.executable} -m envkit"
    env = clean_env(ENVKIT_CONFIG_DIR=setup["env"]["ENVKIT_CONFIG_DIR"])
    (during,) = run_shell("bash", f'eval "$({exe} env --shell bash)"; {DUMP}', work, env)
    assert during["_ENVKIT_PROFILE"] == "cpu"
    assert during["PYTHONUNBUFFERED"] == "1"
    assert during["OMP_NUM_THREADS"] == str(_physical_cores())
    assert "PYTORCH_ENABLE_MPS_FALLBACK" not in during


def _physical_cores() -> int:
    from envkit.facts import gather

    return gather(runtime=False, gpu_detail=False).template_values()["perf_cores"]


def test_env_for_an_m3_max_snapshot(setup):
    r = envkit("env", "--profile", "m3-max", "--replay", str(SNAPSHOTS / "m3_max_macos14.json"), "--shell", "bash",
               env=setup["env"], cwd=setup["work"])
    assert r.returncode == 0, r.stderr
    assert "export OMP_NUM_THREADS=12\n" in r.stdout
    assert "export PYTORCH_ENABLE_MPS_FALLBACK=1\n" in r.stdout
    assert "WATERMARK" not in r.stdout and "KMP_DUPLICATE_LIB_OK" not in r.stdout
    r = envkit("env", "--profile", "auto", "--replay", str(SNAPSHOTS / "m3_max_macos14.json"), "--shell", "dotenv",
               env=setup["env"], cwd=setup["work"])
    assert 'OMP_NUM_THREADS="12"' in r.stdout and "_ENVKIT_PROFILE" not in r.stdout


def test_dotenv_and_envrc_read_back_in_bash(setup):
    work = setup["work"]
    r = envkit("env", "--profile", "hostile", "--write", ".envkit", env=setup["env"], cwd=work)
    assert r.returncode == 0, r.stderr
    # .env sourced by a shell (set -a) and .envrc as direnv runs it (bash, with its PATH_add)
    (dotenv,) = run_shell("bash", f"set -a; . .envkit/.env; set +a; {DUMP}", work, clean_env())
    (envrc,) = run_shell("bash", f'PATH_add() {{ PATH="$1:$PATH"; }}; . .envkit/.envrc; {DUMP}', work, clean_env())
    for d in (dotenv, envrc):
        for k, v in HOSTILE.items():
            assert d[k] == v, k
    assert not (work / "pwned").exists()


def _managed_venv(setup):
    work = setup["work"]
    venv = work / ".envkit" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    r = envkit("env", "--profile", "hostile", "--write", ".envkit", env=setup["env"], cwd=work)
    assert r.returncode == 0, r.stderr
    return work, venv


def test_activate_also_activates_the_managed_venv(setup):
    work, venv = _managed_venv(setup)
    env = clean_env()
    during, after = run_shell("bash", f". .envkit/activate; {DUMP}; deactivate_envkit; {DUMP}", work, env)
    assert during["VIRTUAL_ENV"] == str(venv) and during["PATH"].startswith(str(venv / "bin"))
    assert "VIRTUAL_ENV" not in after and after["PATH"] == env["PATH"]


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed")
def test_activate_fish_also_activates_the_managed_venv(setup):
    work, venv = _managed_venv(setup)
    during, after = run_shell("fish", f"source .envkit/activate.fish; {DUMP}; deactivate_envkit; {DUMP}", work, clean_env())
    assert during["VIRTUAL_ENV"] == str(venv) and "VIRTUAL_ENV" not in after


def test_edited_files_are_kept_without_force(setup):
    work = setup["work"]
    d = work / ".envkit"
    assert envkit("env", "--profile", "cpu", "--write", str(d), env=setup["env"], cwd=work).returncode == 0
    names = {p.name for p in d.iterdir()}
    assert {"activate", "activate.fish", ".env", ".envrc", ".envkit-manifest"} <= names
    # unchanged files: a second write (another profile) just replaces them
    assert envkit("env", "--profile", "hostile", "--write", str(d), env=setup["env"], cwd=work).returncode == 0
    assert "ENVKIT_T_CMD" in (d / "activate").read_text()
    (d / "activate").write_text((d / "activate").read_text() + "export MINE=1\n")
    r = envkit("env", "--profile", "cpu", "--write", str(d), env=setup["env"], cwd=work)
    assert r.returncode == 2
    assert "activate" in r.stderr and "edited" in r.stderr and "--force" in r.stderr
    assert "MINE=1" in (d / "activate").read_text() and "ENVKIT_T_CMD" in (d / ".env").read_text()  # nothing written
    r = envkit("env", "--profile", "cpu", "--write", str(d), "--force", env=setup["env"], cwd=work)
    assert r.returncode == 0 and "MINE" not in (d / "activate").read_text()
    # a file envkit never wrote
    other = work / "other"
    other.mkdir()
    (other / ".env").write_text("SECRET=1\n")
    r = envkit("env", "--profile", "cpu", "--write", str(other), env=setup["env"], cwd=work)
    assert r.returncode == 2 and ".env" in r.stderr and "not written by envkit" in r.stderr
    assert (other / ".env").read_text() == "SECRET=1\n" and not (other / "activate").exists()


def test_bad_names_and_newlines_are_refused(setup):
    from envkit.profiles.envscripts import render
    from envkit.errors import EnvkitError

    for env in ({"1BAD": "x"}, {"BAD-NAME": "x"}, {"A B": "x"}, {"OK": "line1\nline2"}, {"OK": "a\rb"}):
        with pytest.raises(EnvkitError):
            render("bash", env, profile_name="t")
    assert 'X="it\'s \\$x"' in render("dotenv", {"X": "it's $x"}, profile_name="t")
    # through the CLI: a user profile with a newline value
    cfg = Path(setup["env"]["ENVKIT_CONFIG_DIR"]) / "profiles"
    (cfg / "nl.toml").write_text('extends = "cpu"\n[env]\nX = "a\\nb"\n')
    r = envkit("env", "--profile", "nl", env=setup["env"], cwd=setup["work"])
    assert r.returncode == 2 and "newline" in r.stderr and "nl.toml" in r.stderr


def test_write_env_scripts_api(tmp_path, setup):
    from envkit.profiles.envscripts import write_env_scripts
    from envkit.profiles import load_profile

    paths = write_env_scripts(tmp_path / "x", load_profile("cpu"), None, force=False)
    assert sorted(p.name for p in paths) == [".env", ".envrc", "activate", "activate.fish"]
    assert all(p.is_file() for p in paths)
    assert write_env_scripts(tmp_path / "x", "conservative", None, force=False) == paths
    assert "PYTORCH_ENABLE_MPS_FALLBACK" in (tmp_path / "x" / "activate").read_text()
