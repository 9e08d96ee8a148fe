"""Hostile run folders made from a genuine one, and the invariants every command must keep on them.

`mutate(folder, rng, marker)` changes a copy of a real run folder the way someone who sends it
could: a file replaced by a FIFO, a link (to /dev/zero, to a file outside), a sparse giant, an
empty or garbage file, a folder; a value of record.json of the wrong type or nested deep; control
characters in every string the screen shows; a patch or an archive that says more than the record;
paths inside the folder and outside it; a command, an interpreter, a config import or a package
index that would create `marker` if anything ran it. Every mutation is named, so a finding says
which ones made it.

`check(folder, marker, commands)` runs envkit's commands on it in this process (a SIGALRM bounds
each: a hang is a finding, not a stuck test) and returns the findings: a marker that appeared, a
traceback, an exit code other than 2 from `reproduce` without consent (0 or 1 only where nothing
asked; there is no terminal and no --yes), a timeout, a file written outside the folder's own
reproduction, a temporary folder left behind, raw control characters on the screen."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import random
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

FILES = ["record.json", "pylock.toml", "config.json", "summary.json", "metrics.jsonl", "environment.json", "record.seal",
         "heartbeat.json", ".owner.lock", "reproductions.json", "code/project-untracked.tar", "code"]
NASTY = ["\r", "\x1b[2K", "\x1b]0;title\x07", "\u202e", "\x00", "\n", "\x9b31m", "\u2028", "..", "/", "$(touch X)", "'", '"']


def _nasty_text(rng: random.Random, base: str) -> str:
    return base + "".join(rng.choice(NASTY) for _ in range(rng.randint(1, 4))) + rng.choice(["python train.py", "", "x" * 300])


def _regular(path: Path) -> bool:
    """A file the generator itself may read (an earlier mutation may have planted a FIFO or a giant)."""
    return path.is_file() and not path.is_symlink() and path.stat().st_size < (64 << 20)


def _json_edit(path: Path, fn) -> bool:
    if not _regular(path):
        return False
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # an earlier mutation nested it 200,000 deep
        return False
    if not isinstance(data, dict):
        return False
    try:
        fn(data)
    except (TypeError, KeyError, AttributeError, IndexError):  # an earlier mutation changed the shape
        return False
    path.write_text(json.dumps(data))
    return True


def tar_bytes(members: list[tuple[str, bytes] | tarfile.TarInfo], mode: str = "w") -> bytes:
    """An archive of `members` ((name, bytes) or a TarInfo of a link or folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
    return buf.getvalue()


def _replace_file(run: Path, rng: random.Random, marker: Path) -> str:
    name = rng.choice(FILES)
    path = run / name
    kind = rng.choice(["fifo", "link-dev-zero", "link-outside", "sparse", "empty", "garbage", "folder", "deep"])
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "link-outside":
        outside = marker.parent / "outside.txt"
        outside.write_text('{"status": "completed"}\n')
        path.symlink_to(outside)
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(rng.choice([1 << 30, 5 << 30]))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096))))
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text("[" * 200_000 + "]" * 200_000)
    return f"{name}:{kind}"


def _wrong_type(run: Path, rng: random.Random, marker: Path) -> str:
    key = rng.choice(["kind", "python", "cwd", "command", "code", "data", "config", "environment", "processes", "determinism",
                      "code.0.folder", "code.0.role", "code.0.commit", "code.0.patch", "code.0.untracked", "code.0.submodules",
                      "code.0.relative", "processes.world", "config.declared", "environment.local", "data.0.path"])
    value = rng.choice([None, 0, -1, 2 ** 70, 1.5, True, "x", [], {}, [[[[]]]], {"a": {"b": {"c": {}}}}, "../../etc",
                        "/", str(marker), 65537, "code/../../x"])

    def put(d):
        parts = key.split(".")
        cur = d
        for p in parts[:-1]:
            nxt = cur[int(p)] if isinstance(cur, list) and p.isdigit() and int(p) < len(cur) else (cur.get(p) if isinstance(cur, dict) else None)
            if nxt is None:
                return
            cur = nxt
        last = parts[-1]
        if isinstance(cur, dict):
            cur[last] = value
        elif isinstance(cur, list) and last.isdigit() and int(last) < len(cur):
            cur[int(last)] = value
    _json_edit(run / "record.json", put)
    return f"record.json:{key}={value!r}"[:120]


def _control_chars(run: Path, rng: random.Random, marker: Path) -> str:
    where = rng.choice(["command", "cwd", "folder", "role", "python", "untracked", "profile"])

    def put(d):
        if where == "command":
            d["command"] = [_nasty_text(rng, "python"), "-c", _nasty_text(rng, f"open({str(marker)!r},'w')")]
        elif where in ("cwd", "python"):
            d[where] = "/tmp/" + _nasty_text(rng, "w")
        elif where == "profile":
            d["profile"] = _nasty_text(rng, "cpu")
        elif d.get("code"):
            c = d["code"][0]
            if where == "folder":
                c["folder"] = "/tmp/" + _nasty_text(rng, "repo")
            elif where == "role":
                c["role"] = _nasty_text(rng, "project")
            else:
                c["untracked"] = [{"path": _nasty_text(rng, "f")}]
    _json_edit(run / "record.json", put)
    return f"control-chars:{where}"


def _patch_archive(run: Path, rng: random.Random, marker: Path) -> str:
    kind = rng.choice(["plain-diff", "garbage-patch", "link-patch", "tracked-member", "unlisted-member", "link-member", "abs-member"])
    code = run / "code"
    if code.is_symlink() or not code.is_dir():
        return f"patch:{kind}:skipped"
    payload = f"open({str(marker)!r}, 'w').close()\n".encode()
    if kind == "plain-diff":
        _put(code / "project.patch", f"--- a/train.py\n+++ b/train.py\n@@ -1 +1,2 @@\n from envkit import track\n+{payload.decode()}".encode())
    elif kind == "garbage-patch":
        _put(code / "project.patch", bytes(rng.randrange(256) for _ in range(500)))
    elif kind == "link-patch":
        _put(code / "project.patch", ("diff --git a/data b/data\nnew file mode 120000\n--- /dev/null\n+++ b/data\n@@ -0,0 +1 @@\n"
                                      f"+{marker.parent}\n\\ No newline at end of file\n").encode())
        _put(code / "project-untracked.tar", tar_bytes([("data/PWNED.py", payload)]))
    elif kind == "tracked-member":
        _put(code / "project-untracked.tar", tar_bytes([("train.py", payload)]))
    elif kind == "unlisted-member":
        _put(code / "project-untracked.tar", tar_bytes([("notes.txt", b"x"), ("evil.py", payload)]))
    elif kind == "link-member":
        info = tarfile.TarInfo("data")
        info.type, info.linkname = tarfile.SYMTYPE, str(marker.parent)
        _put(code / "project-untracked.tar", tar_bytes([info, ("data/x.py", payload)]))
    else:
        _put(code / "project-untracked.tar", tar_bytes([(str(marker), payload)]))

    def point(d):
        if d.get("code"):
            d["code"][0].update(patch="code/project.patch", dirty=True, untracked_archive="code/project-untracked.tar")
            if rng.random() < 0.5:
                d["code"][0]["untracked"] = [{"path": "data/PWNED.py"}, {"path": "train.py"}, {"path": "evil.py"}, {"path": "data/x.py"}]
    _json_edit(run / "record.json", point)
    return f"patch:{kind}"


def _put(path: Path, data: bytes) -> None:
    """`data` at `path`, whatever an earlier mutation left there (a folder, a FIFO, a link)."""
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.write_bytes(data)


def _marker_script(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)
    return path


def _runs_code(run: Path, rng: random.Random, marker: Path) -> str:
    kind = rng.choice(["command", "python-inside", "python-outside", "cwd-inside", "repo-inside", "config-import", "local-index",
                       "http-index", "shadow-envkit", "processes"])

    def edit(d):
        if kind == "command":
            d["command"] = ["touch", str(marker)]
        elif kind == "python-inside":
            d["python"] = str(_marker_script(run / "bin" / "python", marker))
        elif kind == "python-outside":
            d["python"] = str(_marker_script(marker.parent / "bin" / "python", marker))
        elif kind == "cwd-inside":
            d["cwd"] = str(run)
        elif kind == "repo-inside" and d.get("code"):
            repo = run / "repo"
            repo.mkdir(exist_ok=True)
            os.system(f"git -C {repo} init -q 2>/dev/null; git -C {repo} config core.fsmonitor {_marker_script(repo / 'm.sh', marker)}")
            d["code"][0]["folder"] = str(repo)
        elif kind == "config-import":
            d.update(kind="run", config={"declared": {"model": {"type": "os:system"}}, "origin": {"model.type": "train.yaml"}})
            d.pop("cwd", None)
        elif kind == "shadow-envkit":
            shadow = run.parent.parent.parent / "envkit"
            shadow.mkdir(exist_ok=True)
            (shadow / "__init__.py").write_text("")
            (shadow / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
            d.update(kind="run", config={"declared": {}, "origin": {}})
            d.pop("cwd", None)
        elif kind == "processes":
            d["processes"] = {"world": rng.choice([0, 4, 65536, 65537, 10 ** 9]), "nodes": rng.choice([1, 2, 0])}
    if kind in ("local-index", "http-index"):
        lock = run / "pylock.toml"
        if not _regular(lock):
            return f"runs:{kind}:skipped"
        try:
            text = lock.read_text()
        except (OSError, UnicodeDecodeError):
            return f"runs:{kind}:skipped"
        url = f"file://{run}/idx" if kind == "local-index" else "http://pkgs.example.invalid/simple"
        lock.write_text(text.replace("[tool.envkit]", f'[tool.envkit]\nindexes = ["{url}"]', 1))
    else:
        _json_edit(run / "record.json", edit)
    return f"runs:{kind}"


MUTATIONS = [_replace_file, _wrong_type, _control_chars, _patch_archive, _runs_code]


def mutate(run: Path, rng: random.Random, marker: Path) -> list[str]:
    """1 to 3 mutations of the folder at `run` (a copy); their names."""
    done = []
    for _ in range(rng.randint(1, 3)):
        fn = rng.choice(MUTATIONS)
        try:
            done.append(fn(run, rng, marker))
        except OSError as exc:  # an earlier mutation left something this one cannot write through
            done.append(f"{fn.__name__}:skipped ({exc.strerror})")
    return done


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout


def run_command(args: list[str], timeout: float) -> tuple[int | str, str, str]:
    """envkit ARGS in this process: (exit code, or "timeout" or "traceback"; stdout; stderr)."""
    from envkit.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    code: int | str
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _Timeout:
        code = "timeout"
    except BaseException:  # noqa: BLE001 - a traceback is a finding, whatever raised it
        code = "traceback"
        err.write(traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


COMMANDS = [["reproduce", "{run}"], ["reproduce", "{run}", "--check"], ["reproduce", "{run}", "--json"], ["runs", "{runs}"],
            ["monitor", "{run}", "--once"], ["plot", "{run}", "-o", "{out}"]]


def check(run: Path, marker: Path, timeout: float = 20.0, commands=COMMANDS) -> list[str]:
    """The findings of envkit's commands on the hostile folder at `run` (empty: every invariant held)."""
    findings = []
    tmp = Path(tempfile.gettempdir())
    before = {p.name for p in tmp.glob("envkit-reproduce-*")}
    outside = {p for p in run.parent.parent.parent.rglob("*") if not p.is_relative_to(run)} if run.parent.parent.parent.is_dir() else set()
    for template in commands:
        args = [a.format(run=run, runs=run.parent.parent, out=marker.parent / "plot.png") for a in template]
        t0 = time.monotonic()
        code, out, err = run_command(args, timeout)
        what = " ".join(template)
        if code in ("timeout", "traceback"):
            findings.append(f"{what}: {code} ({err.strip().splitlines()[-1][:200] if err.strip() else ''})")
        elif "Traceback" in err:
            findings.append(f"{what}: a traceback on stderr")
        if template[0] == "reproduce" and "--check" not in template and code != 2:
            findings.append(f"{what}: exit {code} without consent (expected 2)")
        if template[0] == "reproduce" and "--json" in template and code in (0, 1, 2):
            try:
                json.loads(out)
            except ValueError:
                findings.append(f"{what}: stdout is not one JSON object")
        if any(c in out or c in err for c in ("\x1b", "\r", "\u202e", "\x9b")):
            findings.append(f"{what}: raw control characters on the screen")
        if marker.exists():
            findings.append(f"{what}: the marker was created")
            marker.unlink()
        if time.monotonic() - t0 > timeout:
            findings.append(f"{what}: took {time.monotonic() - t0:.1f} s")
    left = {p.name for p in tmp.glob("envkit-reproduce-*")} - before
    if left:
        findings.append(f"temporary folders left: {sorted(left)[:3]}")
    if run.parent.parent.parent.is_dir():
        new = {p for p in run.parent.parent.parent.rglob("*") if not p.is_relative_to(run)} - outside
        new = {p for p in new if p != marker.parent / "plot.png" and not p.name.startswith("outside")}
        if new:
            findings.append(f"written outside the run folder: {sorted(str(p) for p in new)[:3]}")
    return findings


# ---------------------------------------------------------------- shared by the run-folder tests

SCRIPT = "from envkit import track\nfor s in range(1, 4):\n    track.log(s, loss=1.0 / s)\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@e", "-c", "user.name=t", *args], check=True,
                          capture_output=True, text=True).stdout


def genuine_run(root: Path, env: dict, moved_on: bool = True) -> Path:
    """A real `envkit exec` run folder, sealed: a three-step script in a git repository under `root`,
    an untracked file beside it (kept in the run folder's archive), and with `moved_on` the tree
    committed on since (a reproduction then checks the run's commit out in a worktree)."""
    repo = root / "proj"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("runs/\n")
    (repo / "train.py").write_text(SCRIPT)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    (repo / "notes.txt").write_text("untracked, kept in the run folder's archive\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("ENVKIT_", "PYTORCH_"))}
    full |= {"ENVKIT_CONFIG_DIR": str(root / "config")} | env  # no tuned profile of the user's
    r = subprocess.run([sys.executable, "-m", "envkit", "exec", "--name", "proj", "--", sys.executable, "train.py"], cwd=repo,
                       env=full, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    run = next((repo / "runs" / "proj").iterdir())
    if moved_on:
        (repo / "later.py").write_text("x = 1\n")
        git(repo, "add", "later.py")
        git(repo, "commit", "-qm", "two")
    return run


def edit_json(path: Path, fn) -> None:
    """`fn` applied to the JSON object in `path`, written back."""
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def one_error_line(r) -> str:
    """The last stderr line of a finished envkit, checked to be its one-line error (no traceback anywhere)."""
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("envkit: error: "), r.stderr[-3000:]
    return line


def on_a_terminal(args: list[str], env: dict, at_question, answer: bytes = b"y\n", timeout: float = 300) -> tuple[int, str]:
    """envkit ARGS on a pty: `at_question()` runs while the question waits, then `answer` is typed."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("ENVKIT_")} | env
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, [sys.executable, "-m", "envkit", *args], full)
    seen, deadline = b"", time.monotonic() + 120
    while b"[y/N]" not in seen and time.monotonic() < deadline:
        try:
            seen += os.read(fd, 4096)
        except OSError:
            break
    assert b"[y/N]" in seen, seen.decode(errors="replace")[-3000:]
    at_question()
    os.write(fd, answer)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")
