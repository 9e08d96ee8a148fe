"""The README and the docs site say what envkit does today, and cannot drift from it unnoticed:
- the site builds with `mkdocs build --strict` (a broken link or anchor, a page left out of the
  nav fails it), into a temporary folder, never into the repository;
- docs/reference/train-yaml.md is exactly what its generator writes from the trainer's schema, and
  names every key;
- the README stays a five-minute read, its two set-up commands are the ones CI runs, and its
  table holds every command `envkit --help` lists;
- the README's tour outputs have the shape the
  commands print now: the same kinds of lines in the same order ("[ok]   os:", "2/2 gates hold",
  the runs table's columns); the docs' samples of replayed machines are what the command prints.
(Every relative link of the README and the docs reaching its file and section:
test_references.py.)"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _EMPTY_CONFIG_DIR, ROOT, envkit

README = ROOT / "README.md"
DOCS = ROOT / "docs"
needs_mkdocs = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                                  reason="mkdocs and mkdocs-material come with the test extra: pip install -e '.[test]'")


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    # NO_MKDOCS_2_WARNING hides Material's banners (9.7.2+); the build must print none on its own
    env = {k: v for k, v in os.environ.items() if k != "NO_MKDOCS_2_WARNING"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], capture_output=True, text=True, timeout=120, env=env, cwd=config.parent)


# ---------------------------------------------------------------- the site


@needs_mkdocs
def test_the_site_builds_strict_outside_the_repository(tmp_path):
    before = sorted(p.name for p in ROOT.iterdir())
    r = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stderr, r.stderr
    # nothing but mkdocs' own INFO lines: no banner (Material 9.7.2+ prints one on every build;
    # the docs extra pins 9.7.1, mkdocs.yml says why: pip install -e '.[docs]')
    assert [line for line in (r.stdout + r.stderr).splitlines() if line.strip() and not line.startswith("INFO ")] == []
    assert sorted(p.name for p in ROOT.iterdir()) == before  # no site/ (or anything else) left in the repository
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    # every page of docs/ is on the site (x.md -> x/index.html; index.md and README.md -> the folder's index.html)
    pages = {md.relative_to(DOCS).with_suffix("").as_posix() for md in DOCS.rglob("*.md")}
    wanted = {re.sub(r"(^|/)(index|README)$", "", page).strip("/") for page in pages}
    assert {(w + "/index.html").lstrip("/") for w in wanted} <= built
    assert len(wanted) >= 20  # the site's pages, the generated reference and the knowledge base


def test_the_docs_extra_pins_the_material_the_test_extra_installs():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the pins read the same on 3.10
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "mkdocs-material==9.7.1" in extras["docs"]
    assert set(extras["docs"]) <= set(extras["test"])


def test_every_page_that_says_how_to_build_the_docs_names_the_docs_extra():
    said = {}  # page -> the extras its paragraphs about MkDocs tell a reader to install
    for page in [README, *sorted(DOCS.rglob("*.md"))]:
        for paragraph in page.read_text(encoding="utf-8").split("\n\n"):
            if "mkdocs" in paragraph.lower():
                said.setdefault(page.relative_to(ROOT).as_posix(), set()).update(re.findall(r"pip install -e '\.\[(\w+)\]'", paragraph))
    assert said["README.md"] == {"docs"}
    assert said["docs/index.md"] == {"docs"}
    assert set().union(*said.values()) == {"docs"}, said


@needs_mkdocs
def test_the_strict_build_fails_on_a_broken_link_an_anchor_and_a_page_outside_the_nav(tmp_path):
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    (tmp_path / "docs" / "orphan-page.md").write_text("# Not in the nav\n")
    with open(tmp_path / "docs" / "index.md", "a") as f:
        f.write("\n[gone](no-such-page.md) and [a section](setup.md#no-such-section)\n")
    r = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    # a log record is a WARNING/INFO line and the indented lines under it (the pages left out of the nav)
    records = re.split(r"\n(?=[A-Z]+ +- )", r.stdout + r.stderr)
    warnings = "\n".join(rec for rec in records if rec.startswith("WARNING"))
    assert r.returncode != 0
    assert [planted for planted in ("orphan-page.md", "no-such-page.md", "#no-such-section") if planted not in warnings] == [], r.stderr


# ---------------------------------------------------------------- the generated train.yaml reference


def test_the_train_yaml_reference_is_what_the_generator_writes():
    from envkit.config import schema_doc

    committed = (DOCS / "reference" / "train-yaml.md").read_text(encoding="utf-8")
    assert committed == schema_doc.render(), "docs/reference/train-yaml.md is stale: run python -m envkit.config.schema_doc"


def test_the_train_yaml_reference_names_every_key_with_its_default_and_help():
    from envkit.config.schema import SCHEMA

    text = (DOCS / "reference" / "train-yaml.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z0-9_]+\.[a-z0-9_]+)` \|.*$", text, re.M)}
    keys = {f"{section}.{key}" for section, fields in SCHEMA.items() for key in fields}
    assert set(rows) == keys
    assert len(keys) >= 80
    # read straight from the table: a choice list, a default, a help line
    assert "`cosine`, `constant`" in rows["training.schedule"] and "`1337`" in rows["experiment.seed"]
    assert rows["training.optimizer"].count("`") >= 8 and "lion" in rows["training.optimizer"]
    assert [k for k, f in ((f"{s}.{k}", f) for s, fs in SCHEMA.items() for k, f in fs.items()) if not f.help] == []


def test_the_generator_check_mode_fails_on_a_stale_file(tmp_path):
    stale = tmp_path / "train-yaml.md"
    stale.write_text((DOCS / "reference" / "train-yaml.md").read_text().replace("peak learning rate", "learning rate"))
    r = subprocess.run([sys.executable, "-m", "envkit.config.schema_doc", "--check", "--output", str(stale)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1 and "out of date" in r.stderr


# ---------------------------------------------------------------- the README


def test_the_readme_is_a_five_minute_read():
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_set_up_commands_are_the_ones_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [ci[i + 1] for i, line in enumerate(ci) if re.fullmatch(r"# README command \d", line)]
    readme = README.read_text().splitlines()
    assert len(commands) == 2
    assert [c for c in commands if c not in readme] == []


def test_the_readme_lists_every_command_with_its_help_line():
    from envkit.cli import COMMANDS

    rows = dict(re.findall(r"^\| `envkit ([a-z]+)` \| (.+) \|$", README.read_text(), re.M))
    assert {name: text.replace("`", "") for name, text in rows.items()} == {
        name: short.replace("`", "") for name, (_, short) in COMMANDS.items()}


# ---------------------------------------------------------------- sample outputs keep their shape


def samples(text: str) -> dict[str, list[str]]:
    """`$ envkit ARGS` (or `$ COLUMNS=N envkit ARGS`: on a terminal N columns wide) -> the output
    lines shown under it, from every fenced block of a page."""
    out: dict[str, list[str]] = {}
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S):
        current = None
        for line in block.splitlines():
            if line.startswith("$ "):
                current = line[2:] if re.match(r"\$ (COLUMNS=\d+ )?envkit ", line) else None
                if current:
                    out[current] = []
            elif current:
                out[current].append(line)
    return out


# The kinds of line a reader relies on, per command: a README line must be one of these, and the
# README's sequence of kinds must appear, in order, in what the command prints now. Machine-specific
# text (the OS, a check's message, a path, a number) is not part of a kind.
KINDS = {
    "doctor": [(r"envkit doctor: .+", "header"),
               (r"\[(?:ok|warn|FAIL|skip)\] +([\w-]+): .+", "check {}"),
               (r" {7}fix: .+", "fix"),
               (r"profile: \S+", "profile"),
               (r"\d+ passed, \d+ warnings, \d+ failures: .+", "summary")],
    "check": [(r"(?:ok|FAIL) +(\S+): .+", "gate {}"),
              (r"\d+/\d+ gates hold(?:; [^:]+)?(?:: FAILED)?", "total")],
    "init": [(r"wrote (\S+) from template (\w+); next: `envkit validate \1` and `envkit run \1`", "wrote {} {}"),
             (r"wrote (\S+) from template (\w+); next: `envkit exec -- python \1`", "wrote script {} {}")],
    "validate": [(r"(\S+): valid \((\w+) on [\w/]+, \d+ steps, device \w+, precision \w+, profile \S+\)", "valid {} {}")],
    "exec": [(r"envkit: run \S+ \(profile \S+\)", "run"),
             (r"envkit: attempt (\d+)/(\d+): (.+)", "attempt {}/{}: {}"),
             (r"step \d+ loss [\d.]+", "script"),
             (r"envkit: attempt (\d+) exited with exit code (\d+)", "exited {} {}"),
             (r"envkit: run \S+: (\w+) \(exit code (\d+)\)", "done {} {}")],
    "run": [(r"(starting|resuming) run \S+", "{} run"),
            (r"training (\w+) for \d+ steps \(\d+ x \d+ accum x \d+ proc, \w+, compile .+\) from step \d+; run folder \S+", "training {}"),
            (r"eval step \d+: val loss [\d.]+, accuracy [\d.]+ \(baseline [\d.]+\)", "eval"),
            # the run's rate over its training time, and beside it, named, the median of the logged windows
            # and the steps it counts (the warm-up's window left out, named)
            (r"completed: (\d+)/\1 steps, final loss [\d.]+, best val loss [\d.]+, accuracy [\d.]+, [\d,]+ (tokens|samples)/s overall "
             r"\([\d,]+ \2/s median of the logged windows of steps \d+-\1; steps 1-\d+, the warm-up, left out\), \S+ of training",
             "completed")],
    "runs": [(r"experiment +run +status +steps +loss +best val loss +accuracy +avg util", "columns"),
             (r"\S+ +\S+ +(?:completed|running|interrupted|failed|stalled|orphaned|killed) +\d+/(?:\d+|-) +.+", "row")],
}


def kind(command: str, line: str) -> str | None:
    for pattern, name in KINDS[command]:
        m = re.fullmatch(pattern, line)
        if m:
            return name.format(*m.groups())
    return None


def kinds(command: str, lines: list[str]) -> list[str | None]:
    return [kind(command, line) for line in lines if line.strip() != "..."]


def in_order(wanted: list, got: list) -> bool:
    it = iter(got)
    return all(any(w == g for g in it) for w in wanted)


def test_every_line_of_the_readme_samples_is_a_kind_the_command_prints_now():
    """Fast: the README's sample lines are of the shapes the commands print today (the tour test,
    slow, checks on a fresh clone that each command prints them, in order)."""
    shown = [(cmd.split()[1], line) for cmd, lines in samples(README.read_text()).items()
             if cmd.split()[1] in KINDS for line in lines if line.strip() != "..."]
    assert [f"{name}: {line}" for name, line in shown if kind(name, line) is None] == []
    assert {name for name, _ in shown} >= {"doctor", "check", "init", "validate", "run", "exec", "runs"}


def test_the_shape_matcher_tells_the_old_doctor_format_from_the_new():
    old = ["envkit doctor  Apple M3 Max (12P+4E, 40-core GPU, 128 GiB), macOS 14.5", "[✓] System", "    ✓ os: macOS 14.5 (23F79)"]
    new = ["envkit doctor: AMD EPYC (2 cores, 23.5 GiB), Debian GNU/Linux 12 (bookworm) 12", "[ok]   os: Debian GNU/Linux 12 (bookworm)"]
    assert kinds("doctor", old) == [None, None, None]
    assert kinds("doctor", new) == ["header", "check os"]
    assert in_order(["header", "check os"], ["header", "check os", "check mps"])
    assert not in_order(["check mps", "check os"], ["header", "check os", "check mps"])


# The tour itself, run in order on a fresh clone: tests/docs/test_readme_tour.py.


def test_the_doctor_sample_shows_every_check_doctor_runs():
    shown = next(lines for cmd, lines in samples(README.read_text()).items() if cmd == "envkit doctor")
    ids = [k.split()[1] for k in kinds("doctor", shown) if k and k.startswith("check ")]
    r = envkit("doctor", "--json", "--no-runtime", timeout=120)
    assert r.returncode in (0, 1), r.stderr
    assert ids == [c["id"] for c in json.loads(r.stdout)["checks"]]


def replayed_samples() -> list:
    """The docs' samples of a recorded machine (`--replay tests/snapshots/...`): the same output on any
    machine. `envkit setup --replay` is left out: its plan names this machine's venv path."""
    out = []
    for page in sorted(DOCS.glob("*.md")):
        for cmd, lines in samples(page.read_text()).items():
            words = cmd.split()
            name = words[2] if words[0].startswith("COLUMNS=") else words[1]
            if "--replay tests/snapshots/" in cmd and name != "setup":
                out.append(pytest.param(page.name, cmd, lines, id=f"{page.stem}-{name}" + "-tty" * words[0].startswith("COLUMNS=")))
    return out


def on_a_terminal(args: list[str], columns: str) -> str:
    """What `python -m envkit ARGS` shows on a terminal COLUMNS wide (a pseudo-terminal), without the
    colours and the padding at the ends of lines."""
    import pty

    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    env.update(COLUMNS=columns, ENVKIT_CONFIG_DIR=_EMPTY_CONFIG_DIR)
    proc = subprocess.Popen([sys.executable, "-m", "envkit", *args], stdout=follower, stderr=follower, cwd=ROOT, env=env)
    os.close(follower)
    from processes import read_terminal

    raw = read_terminal(leader)
    proc.wait(timeout=120)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode()).replace("\r", "")
    return "\n".join(line.rstrip() for line in text.splitlines())


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("page,cmd,lines", replayed_samples())
def test_a_replayed_sample_in_the_docs_is_what_the_command_prints(page, cmd, lines):
    words = shlex.split(cmd)
    if words[0].startswith("COLUMNS="):
        printed = on_a_terminal(words[2:], words[0].split("=", 1)[1]).splitlines()
    else:
        r = envkit(*words[1:], cwd=ROOT, timeout=120)
        printed = r.stdout.splitlines()
    assert lines == printed[:len(lines)], f"{page}: {cmd}\n" + "\n".join(printed)
    assert len(lines) >= 3


def test_the_docs_show_replayed_samples():
    found = {p.id for p in replayed_samples()}
    assert found >= {"doctor-doctor", "doctor-doctor-tty", "profiles-profile", "profiles-env"}
