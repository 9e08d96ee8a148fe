"""Every `$ envkit ...` example in docs/ runs as written, page by page, and prints what the page shows.

Each page runs in a fresh folder that holds the repository's `tests/` (the recorded machines the
`--replay` examples read) and nothing else: a file an example needs comes from an earlier example of
the same page (`envkit init ...`, a shell line) or from a fenced block titled with its name
(```` ```yaml title="sweep.yaml" ````, which the page shows in full). Every `$ ` line of a page's
fenced blocks runs in the page's order, in bash, with the `envkit` and `python` of this environment.
Each must exit as its output says (`envkit: error:` is 2; a failed gate or check, 1; else 0), and the
lines the page shows under it must appear in what it printed, in order, numbers aside (a number, a
duration, an absolute path and `...` inside a line match any; a line that is only `...` stands for
lines left out), as tests/docs/test_readme_tour.py does for the README.

An example that cannot run here (a GPU, a Mac, a Slurm cluster, another machine's network) is marked
on the page: `<!-- illustrative: REASON -->` on the line before its block. The fast test below checks
that every `$ envkit` example is in a block that runs or in one marked so, and that each marker
gives its reason.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ROOT, scratch_dir, share_of_cores

DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md"))
MARKER = re.compile(r"^\s*<!-- illustrative: (.+?) -->\s*$")  # a line of its own
FENCE = re.compile(r"^(\s*)```(.*)$")


@dataclass
class Step:
    page: str
    line: int  # 1-based line of the `$ ` line (or of the fence, for a file)
    command: str = ""  # the shell line after `$ `
    shown: list[str] = field(default_factory=list)  # the lines the page shows under it
    file: str = ""  # a titled block: this file, written before the later steps run
    content: str = ""
    illustrative: str = ""  # the marker's reason; such a step never runs

    @property
    def is_envkit(self) -> bool:
        return re.match(r"(?:\w+=\S+ )*envkit ", self.command) is not None


def steps(page: Path) -> list[Step]:
    """A page's fenced blocks as steps, in the page's order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    name = page.relative_to(DOCS).as_posix()
    out: list[Step] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, info = m.group(1), m.group(2).strip()
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [line[len(indent):] for line in lines[i + 1:end]]
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(before)
        reason = marker.group(1) if marker else ""
        title = re.search(r'title="([^"]+)"', info)
        if title:
            out.append(Step(name, i + 1, file=title.group(1), content="\n".join(body) + "\n", illustrative=reason))
        current: Step | None = None
        for k, line in enumerate(body):
            if line.startswith("$ "):
                current = Step(name, i + 2 + k, command=line[2:], illustrative=reason)
                out.append(current)
            elif current is not None:
                current.shown.append(line)
        i = end + 1
    return out


# ---------------------------------------------------------------- matching, numbers aside

NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?:[kMGT](?![A-Za-z]))?"
TOKENS = re.compile(
    r"(?P<path>(?<![\w.:/])/[\w.~+@-][^\s,;'\"`)\]]*)"  # an absolute path
    r"|(?P<duration>\b(?:\d+h\d+m|(?:\d+m)?\d+(?:\.\d+)?s)\b)"  # 4h07m, 3m57s, 57s, 0.04s
    r"|(?P<number>\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?:[kMGT](?![A-Za-z]))?)"
    r"|(?P<space>\s+)"
    r"|(?P<cut>\.\.\.)")


def line_pattern(shown: str) -> re.Pattern:
    """A shown line as a pattern: numbers, durations and absolute paths match any of their kind,
    runs of spaces any run of spaces (tables align to their widest cell), `...` anything."""
    parts: list[str] = []
    pos = 0
    for m in TOKENS.finditer(shown):
        parts.append(re.escape(shown[pos:m.start()]))
        kind = m.lastgroup
        parts.append({"path": r"/\S*", "duration": r"(?:\d+h\d+m|(?:\d+m)?\d+(?:\.\d+)?s)", "number": NUMBER,
                      "space": r"\s+", "cut": r".*"}[kind])
        pos = m.end()
    parts.append(re.escape(shown[pos:]))
    return re.compile("".join(parts))


def unmatched(shown: list[str], printed: list[str]) -> list[str]:
    """The shown lines that do not appear in printed, in order (empty: all do)."""
    wanted = [s.rstrip() for s in shown if s.strip() and s.strip() != "..."]
    got = iter(line.rstrip() for line in printed)
    for n, line in enumerate(wanted):
        pattern = line_pattern(line)
        if not any(pattern.fullmatch(g) for g in got):
            return wanted[n:]
    return []


def expected_exits(step: Step) -> set[int]:
    """What the shown output says the exit code is: an error line is 2 (bad input) or 1 (a fact about
    the machine, such as no build that fits its driver); a failed check or gate, 1; else 0."""
    if any(line.startswith("envkit: error:") for line in step.shown):
        return {1, 2}
    if any(re.search(r"\bFAILED\b|^::error |\b[1-9]\d* failures\b", line) for line in step.shown):
        return {1}
    return {0}


def test_the_matcher_sets_numbers_aside_and_nothing_else():
    assert unmatched(["completed: 300/300 steps, final loss 1.1612, 3,467 tokens/s, 3m57s of training"],
                     ["x", "completed: 20/20 steps, final loss 2.0, 912 tokens/s, 41s of training"]) == []
    assert unmatched(["ETA 4h07m | 3m57s | 0.04s"], ["ETA 12s | 1h00m | 2m01s"]) == []
    assert unmatched(["wrote /tmp/demo/runs/a/curves.png"], ["wrote /tmp/pytest-7/p/runs/a/curves.png"]) == []
    assert unmatched(["mlp-quick-test  exp42  completed  200/200"], ["mlp-quick-test   exp42     completed  9/200"]) == []
    assert unmatched(["envkit selftest  device cpu (...), torch 2.13.0+cpu"], ["envkit selftest  device cpu (x86_64), torch 2.14.1+cpu"]) == []
    # words are words: another status, another key, lines out of order, a line missing
    assert unmatched(["a  completed  1/2"], ["a  interrupted  1/2"]) == ["a  completed  1/2"]
    assert unmatched(['"loss": 0.5,'], ['"lr": 0.5,']) == ['"loss": 0.5,']
    assert unmatched(["one", "two"], ["two", "one"]) == ["two"]
    assert unmatched(["one", "...", "two"], ["one"]) == ["two"]


# ---------------------------------------------------------------- every example runs or is marked


def test_every_envkit_example_runs_or_is_marked_illustrative_with_a_reason():
    examples = [s for page in PAGES for s in steps(page) if s.command]
    assert len([s for s in examples if s.is_envkit]) >= 60
    marked = [s for s in examples if s.illustrative]
    assert [f"{s.page}:{s.line}" for s in marked if len(s.illustrative.split()) < 3] == []  # a reason, not a word
    ran = [s for s in examples if s.is_envkit and not s.illustrative]
    assert len(ran) >= 40  # most examples run here; the marked ones need a GPU, a Mac, a cluster
    # a marker stands before a fenced block, nowhere else (a stray one would mark nothing)
    stray = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if MARKER.search(line):
                nxt = next((x for x in lines[n + 1:] if x.strip()), "")
                if not FENCE.match(nxt):
                    stray.append(f"{page.name}:{n + 1}")
    assert stray == []


# ---------------------------------------------------------------- running a page


# envkit's cache for the pages' runs, not the user's: one for all the pages, so the environment's
# lock that each run's record holds (envkit/record/envlock.py: hashes of every installed wheel, seconds
# of CPU or of index reads) is made once, not once per page.
CACHE = scratch_dir("envkit-test-docs-cache-")


def page_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTORCH_", "ENVKIT_", "PYTEST_", "COLUMNS", "OMP_NUM_THREADS"))}
    env.update(PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
               PYTHONUNBUFFERED="1", ENVKIT_CONFIG_DIR=str(tmp / "config"), ENVKIT_CACHE_DIR=CACHE)
    return share_of_cores(env)


def on_a_terminal(command: str, cwd: Path, env: dict) -> tuple[int, str]:
    """`COLUMNS=N envkit ...` as a terminal N columns wide shows it (a pseudo-terminal), without colours."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(["bash", "-c", command], stdout=follower, stderr=follower, stdin=follower, cwd=cwd,
                            env=env, start_new_session=True)
    os.close(follower)
    from processes import read_terminal

    raw = read_terminal(leader)
    code = proc.wait(timeout=300)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode()).replace("\r", "")
    return code, text


def run_step(step: Step, cwd: Path, env: dict, groups: list[int]) -> tuple[int, str]:
    if step.command.startswith("COLUMNS="):
        return on_a_terminal(step.command, cwd, env)
    proc = subprocess.Popen(["bash", "-c", step.command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    groups.append(proc.pid)  # a `... &` of the page lives in this group until the page's end
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def stop_what_is_left(cwd: Path, env: dict, groups: list[int]) -> None:
    """A page that failed half-way leaves nothing running: its runs are stopped, its shells' groups killed."""
    for heartbeat in cwd.glob("runs/*/*/heartbeat.json"):
        if not (heartbeat.parent / "summary.json").exists():
            subprocess.run([sys.executable, "-m", "envkit", "stop", str(heartbeat.parent), "--grace", "5"], check=False,
                           env=env, cwd=cwd, capture_output=True, timeout=60)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


RUNNABLE = [p for p in PAGES if any(s.command and not s.illustrative for s in steps(p))]


@pytest.mark.slow  # trainings, a sweep, a bench: about a minute and a half on 2 idle cores
@pytest.mark.skipif(sys.platform != "linux" or shutil.which("nvidia-smi") is not None,
                    reason="the pages' runnable examples show a Linux box without a GPU, as CI is")
@pytest.mark.parametrize("page", RUNNABLE, ids=[p.relative_to(DOCS).as_posix() for p in RUNNABLE])
def test_the_page_examples_run_as_written(page, tmp_path):
    runnable = [s for s in steps(page) if s.command and not s.illustrative]
    if any("--slurm" in s.command for s in runnable) and shutil.which("sbatch") is None:
        pytest.skip("its --slurm examples need Slurm's sbatch on PATH (the dry run and the mistakes never call it)")
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "tests").symlink_to(ROOT / "tests", target_is_directory=True)  # the recorded machines --replay reads
    env = page_env(tmp_path)
    groups: list[int] = []
    failures: list[str] = []
    try:
        for step in steps(page):
            if step.illustrative:
                continue
            if step.file:
                (cwd / step.file).write_text(step.content)
                continue
            code, out = run_step(step, cwd, env, groups)
            missing = unmatched(step.shown, out.splitlines())
            if code not in expected_exits(step) or missing:
                failures.append(f"{step.page}:{step.line}: $ {step.command}\nexit {code} (the page says "
                                f"{sorted(expected_exits(step))}); not printed: {missing[:1]}\n--- printed:\n{out[-4000:]}")
                break  # the next examples stand on this one
    finally:
        stop_what_is_left(cwd, env, groups)
    assert not failures, "\n".join(failures)
