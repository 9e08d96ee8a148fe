"""docs/ci.md's two CI jobs, run as the page writes them: its YAML blocks parsed with
yaml.safe_load, every GitHub Actions `run:` step and every GitLab `script:` line run in order, in
bash with errexit as both runners do, in a fresh clone of this repository with a fresh venv as the
job's Python. A command the page gets wrong (an option envkit lacks, a file no step wrote, a
requirement pip cannot read) fails its job, and so this test.

What a CI runner has and this machine has not is stood in for, each said where it is done:

- `uses:` steps are not run: actions/checkout is the clone itself, actions/setup-python the venv
  (with a current pip, as setup-python has: the bundled one cannot read a `git+file:` URL);
- envkit's repository URL (`OWNER/envkit@v0.1.0`, a placeholder the page tells readers to replace)
  is the clone, at its HEAD commit, through the same `envkit @ git+...` requirement;
- the project's `pylock.toml` (the jobs install it; `envkit lock` writes it, and the project commits
  it) is written before the jobs by `envkit lock --no-project`, from a local index with a tiny torch
  (tests/localindex.py), so no step needs the network;
- the project's gates (`[tool.envkit] require` in its pyproject.toml, which the page says the jobs
  read; envkit's own pyproject.toml has none) are added to the clone's pyproject.toml.

The GitLab job runs in the venv the GitHub job left: its `pip install` finds envkit installed at
the same commit and its `setup --lock` finds the lock's set there (a second fresh venv would repeat
the same 15-20 s install); its commands and its JUnit report are checked all the same."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from conftest import _EMPTY_CONFIG_DIR, ROOT
from localindex import PY, LocalIndex, build_wheel

PAGE = ROOT / "docs" / "ci.md"
PLACEHOLDER = "git+https://github.com/OWNER/envkit@v0.1.0"
# what each `uses:` action does on a runner, and what stands in for it here
USES = {"actions/checkout": "the clone is the checkout", "actions/setup-python": "the fresh venv is the job's Python"}
GATES = '\n[tool.envkit]\nrequire = ["torch>=2.11", "python>=3.10"]\n'


def blocks(text: str) -> dict[str, dict]:
    """The page's YAML blocks by their title (the file each one is), parsed."""
    return {title: yaml.safe_load(body) for title, body in re.findall(r'^```yaml title="([^"]+)"\n(.*?)^```', text, re.M | re.S)}


def jobs(text: str) -> list[tuple[str, list[tuple[str | None, str]]]]:
    """[(job, [(command, what), ...])]: every GitHub `run:` and GitLab `script:` line in the page's
    order; a `uses:` step is (None, the reason it is not run)."""
    out = []
    for title, doc in blocks(text).items():
        if "jobs" in doc:  # GitHub Actions: jobs -> steps
            for name, job in doc["jobs"].items():
                steps = []
                for step in job["steps"]:
                    if "uses" in step:
                        action = step["uses"].split("@")[0]
                        steps.append((None, f"{step['uses']}: {USES[action]}"))
                    else:
                        steps.append((step["run"], step.get("name", step["run"])))
                out.append((f"{title}: {name}", steps))
        else:  # GitLab CI: top-level jobs, each a script
            for name, job in doc.items():
                if isinstance(job, dict) and "script" in job:
                    out.append((f"{title}: {name}", [(line, line) for line in job["script"]]))
    return out


def junit_reports(text: str) -> list[str]:
    """The JUnit files the GitLab jobs hand to GitLab (artifacts: reports: junit)."""
    out = []
    for doc in blocks(text).values():
        for job in doc.values():
            if isinstance(job, dict) and "script" in job:
                junit = job.get("artifacts", {}).get("reports", {}).get("junit", [])
                out += [junit] if isinstance(junit, str) else list(junit)
    return out


def test_the_page_has_both_jobs_and_every_step_is_run_or_said_why_not():
    found = jobs(PAGE.read_text())
    assert [name.split(":")[0] for name, _ in found] == [".github/workflows/envkit.yml", ".gitlab-ci.yml"]
    for name, steps in found:
        commands = [c for c, _ in steps if c]
        assert any("envkit setup --lock" in c for c in commands) and any("envkit check" in c for c in commands), name
        # the install names envkit's placeholder URL: the run below swaps in the clone, so it must be this one
        assert all(PLACEHOLDER in c for c in commands if "pip install" in c), name
    assert junit_reports(PAGE.read_text()) == ["envkit-check.xml"]


def _job_env(venv: Path, tmp: Path) -> dict:
    """The job's shell: the venv active, none of this test run's envkit, pytest or pip settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ENVKIT_", "PYTORCH_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH", "UV_", "PIP_REQUIRE"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), PYTHONUNBUFFERED="1",
               ENVKIT_CONFIG_DIR=_EMPTY_CONFIG_DIR, ENVKIT_CACHE_DIR=str(tmp / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _lock(clone: Path, tmp: Path, base: str) -> None:
    """The project's pylock.toml, as `envkit lock` writes it, from a local index: a torch that requires
    filelock, both wheels served on 127.0.0.1 (the server stays up while the jobs install from it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENVKIT_", "PIP_", "UV_", "PYTORCH_"))}
    env.update(ENVKIT_PYTORCH_INDEX=f"{base}/whl", ENVKIT_CONFIG_DIR=_EMPTY_CONFIG_DIR,
               ENVKIT_CACHE_DIR=str(tmp / "lock-cache"), UV_CACHE_DIR=str(tmp / "uv-cache"), PIP_CONFIG_FILE=os.devnull)
    r = subprocess.run([sys.executable, "-m", "envkit", "lock", "--no-project", "--no-numpy", "--target", "linux-x86_64-cpu",
                        "--torch", "2.12.1", "--index-url", f"{base}/pypi/simple"],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not (sys.platform == "linux" and platform.machine() == "x86_64"),
                    reason="the project's lock here is a Linux x86_64 one (the CI page's runners are too)")
@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs a git checkout to clone")
def test_the_ci_jobs_run_as_written_in_a_fresh_clone(tmp_path):
    text = PAGE.read_text()
    clone = tmp_path / "project"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, capture_output=True, timeout=120)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    with (clone / "pyproject.toml").open("a") as f:
        f.write(GATES)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = _job_env(venv, tmp_path)
    up = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "-U", "pip"], env=env, capture_output=True,
                        text=True, timeout=300)
    if up.returncode != 0:
        pytest.skip(f"no current pip for the job's venv from pip's sources here: {up.stderr.strip()[-300:]}")

    d = tmp_path / "wheels"
    d.mkdir()
    # a torch version that no folder of pip's configuration holds: pip reads its configured find-links
    # even beside `--no-index`, and takes a file of the same name there (this machine's /opt/wheels
    # holds the real torch-2.13.0+cpu) in place of the one envkit checked against the lock
    torch = build_wheel(d, "torch", "2.12.1+cpu", f"{PY}-{PY}-manylinux_2_28_x86_64", requires=["filelock"])
    filelock = build_wheel(d, "filelock", "3.16.1", "py3-none-any")
    with LocalIndex({"cpu": [torch], "pypi": [filelock]}) as srv:
        _lock(clone, tmp_path, srv.base)
        ran, skipped = [], []
        for job, steps in jobs(text):
            for command, what in steps:
                if command is None:
                    skipped.append(what)
                    continue
                here = command.replace(PLACEHOLDER, f"git+file://{clone}@{head}")
                r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", here], cwd=clone, env=env,
                                   capture_output=True, text=True, timeout=300)
                assert r.returncode == 0, f"{job}: {what}\n$ {here}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
                ran.append(command)
    assert len(skipped) == 2 and len(ran) == 6, (ran, skipped)
    # what the jobs left: torch as locked, in the job's venv; the JUnit report GitLab reads, with no failure in it
    out = subprocess.run([str(venv / "bin/python"), "-c", "from importlib.metadata import version; print(version('torch'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "2.12.1+cpu"
    for report in junit_reports(text):
        root = ET.parse(clone / report).getroot()
        assert [c.get("name") for c in root.iter("testcase")] == ["torch>=2.11", "python>=3.10", "lock pylock.toml"]
        assert not list(root.iter("failure")), (clone / report).read_text()
