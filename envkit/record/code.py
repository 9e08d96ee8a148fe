"""The code state of a git working tree, kept so that the exact code can be put back: the commit,
the branch, a binary patch of the uncommitted changes to tracked files (`git diff --binary HEAD`,
which `git apply --binary` restores), the untracked files git does not ignore, copied into a
tar file when they are source-sized, and each checked-out submodule as a code state of its own
(its commit, patch and untracked files: `submodules`, with its path), nested ones within theirs.

Untracked files: each at most 1 MiB and not binary (no NUL byte in its first 8 KiB), 16 MiB and
2,000 files in all. A script, a module or a config someone has not added yet is a few KiB; what is
larger or binary and untracked is data (record/data.py fingerprints the data a run names),
a checkpoint, a log or an export, and copying it into every run folder would cost each run's
start more than its record is worth. Files credentials live in (.env, .netrc, keys) or named like a
secret are never copied (the run folder is shared). What is left out is named in the record, with why,
its size and time (`envkit reproduce` links it into the run's worktree from where it is).
Run folders inside the tree (`runs/` is often not ignored) and `.envkit/` are never copied."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_bytes
from envkit.redact import is_secret_arg, strip_userinfo
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.limits import UNTRACKED_COUNT_MAX, UNTRACKED_FILE_MAX, UNTRACKED_TOTAL_MAX

LISTED_SKIPPED = 50


# Every git call envkit makes on a recorded code folder: nothing the repository names runs (no hook,
# no fsmonitor daemon, no pager; `git diff` is given --no-ext-diff --no-textconv), the machine's system
# config is not read, nothing is fetched, nothing prompts. The repository's own config is read: it
# is the user's (git-lfs's filters live there), and a folder inside a run folder, where a received
# repository would be, is refused before git starts.
GIT_SAFE = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false",
            "-c", "core.pager=cat", "-c", "protocol.allow=never", "--no-pager")
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0"}
_GIT_ENV_DROPPED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
                    "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS", "GIT_TRACE", "GIT_EXTERNAL_DIFF")


class InsideRunFolder(EnvkitError):
    """A recorded folder (code, working directory) that lies inside a run folder: a fact about the
    machine that made the run, never used here (a received folder could ship a repository with hooks)."""


def run_folder_above(folder: Path) -> Path | None:
    """The run folder (config.json beside record.json) that holds `folder`, or None."""
    p = Path(os.path.abspath(folder))
    for d in (p, *p.parents):
        try:
            if RunFolder(d).record_file.is_file() and RunFolder(d).is_run():
                return d
        except OSError:
            return None
    return None


def refuse_inside_run(folder: str | Path, what: str, run_dir: Path | None = None) -> None:
    """InsideRunFolder (exit 2) for a recorded `folder` inside `run_dir` or inside any run folder."""
    p = Path(os.path.abspath(folder))
    inside = run_dir if run_dir is not None and (p.is_relative_to(Path(os.path.abspath(run_dir))) or
                                                  p.resolve().is_relative_to(Path(run_dir).resolve())) else run_folder_above(p)
    if inside is None and p.exists():
        inside = run_folder_above(p.resolve())
    if inside is not None:
        raise InsideRunFolder(f"the recorded {what} {folder} lies inside the run folder {inside}: it is never used",
                              where=str(inside), fix="reproduce from your own clone of the code; a run folder is data, "
                              "and nothing in it is run")


def git(folder: Path, *args: str, timeout: float = 20, stdin: bytes | None = None) -> subprocess.CompletedProcess | None:
    """git ARGS in `folder` with hooks, fsmonitor and external programs off (GIT_SAFE); None when git
    cannot run. A folder inside a run folder is refused (InsideRunFolder, exit 2), whoever asks."""
    refuse_inside_run(folder, "code folder")
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROPPED}
    env.update(GIT_ENV)
    try:
        if stdin is not None:
            return subprocess.run(["git", *GIT_SAFE, "-C", str(folder), *args], check=False, capture_output=True, timeout=timeout,
                                  env=env, input=stdin)
        return subprocess.run(["git", *GIT_SAFE, "-C", str(folder), *args], check=False, capture_output=True, timeout=timeout,
                              env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None


def _out(proc) -> str | None:
    return proc.stdout.decode(errors="replace").strip() if proc is not None and proc.returncode == 0 else None


def toplevel(folder: Path) -> Path | None:
    top = _out(git(folder, "rev-parse", "--show-toplevel"))
    return Path(top) if top else None


_SECRET_FILES = re.compile(r"^(\.env(\..*)?|\.netrc|\.pypirc|\.npmrc|id_(rsa|ed25519|ecdsa|dsa).*|credentials.*|.*\.(pem|key|p12|pfx|keystore))$",
                           re.IGNORECASE)


def may_hold_secrets(name: str) -> bool:
    """A file that credentials live in (.env, .netrc, keys) or named like a secret (by whole words,
    envkit/redact.py: `monkey.py` is code): never copied into a run folder, which is shared."""
    return bool(_SECRET_FILES.match(name)) or is_secret_arg(name.split(".")[0])


def _binary(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return b"\0" in fh.read(8192)
    except OSError:
        return True


def untracked(top: Path, pathspec: list[str], exclude: list[Path]) -> tuple[list[tuple[str, Path]], list[dict]]:
    """([(relative path, file)] to keep, [{path, why}] left out) of the untracked, unignored files."""
    proc = git(top, "ls-files", "--others", "--exclude-standard", "-z", "--", *pathspec)
    names = [n for n in (proc.stdout.decode(errors="surrogateescape").split("\0") if proc and proc.returncode == 0 else []) if n]
    keep, skipped, total = [], [], 0
    outside = [e.resolve() for e in exclude]
    for rel in sorted(names):
        path = top / rel
        if rel.startswith(".envkit/") or any(path.resolve().is_relative_to(e) for e in outside):
            continue
        try:
            size = path.lstat().st_size
        except OSError:
            continue
        why = ("may hold secrets" if may_hold_secrets(path.name) else "a link" if path.is_symlink()
               else f"{size:,} bytes, over {UNTRACKED_FILE_MAX >> 20} MiB" if size > UNTRACKED_FILE_MAX
               else "binary" if _binary(path) else f"over the {UNTRACKED_TOTAL_MAX >> 20} MiB kept in all" if total + size > UNTRACKED_TOTAL_MAX
               else f"over {UNTRACKED_COUNT_MAX} files" if len(keep) >= UNTRACKED_COUNT_MAX else None)
        if why:  # size and time: reproduce links the file back from where it is, and says if it changed
            skipped.append({"path": rel, "why": why, "size": size, "mtime": int(path.lstat().st_mtime)})
            continue
        keep.append((rel, path))
        total += size
    return keep, skipped


def _tar(files: list[tuple[str, Path]]) -> bytes:
    """A tar of the files with fixed owners and times: the same files make the same bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), path.stat().st_mode & 0o777, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def code_state(folder: Path, *, role: str, out_dir: Path | None, pathspec: list[str] | None = None,
               exclude: list[Path] | tuple[Path, ...] = ()) -> dict | None:
    """The state of the git working tree holding `folder`, its patch and untracked files written
    into out_dir (run folder's code/) as <role>.patch and <role>-untracked.tar; None outside git."""
    top = toplevel(folder)
    if top is None:
        return None
    spec = pathspec or []
    # the commit and its tree in one call: the tree is what a reproduction checks out when the commit
    # itself is gone (amended, rebased, garbage-collected) but its content is still in the repository
    commit, _, tree = (_out(git(top, "rev-parse", "HEAD", "HEAD^{tree}")) or "").partition("\n")
    commit, tree = commit.strip() or None, tree.strip() or None
    branch = _out(git(top, "rev-parse", "--abbrev-ref", "HEAD"))
    remote = _out(git(top, "remote", "get-url", "origin"))
    # submodules are recorded each as a code state of its own (below): the patch leaves their pointers out
    diff = git(top, "diff", "--binary", "--no-ext-diff", "--no-textconv", "--ignore-submodules=all", "HEAD", "--", *spec) \
        if commit else None
    patch = diff.stdout if diff is not None and diff.returncode == 0 else b""
    files, skipped = untracked(top, spec, list(exclude))
    h = hashlib.sha256(f"{commit}\n".encode() + patch)
    listed = []
    for rel, path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        listed.append({"path": rel, "sha256": digest})
        h.update(f"\n{rel} {digest}".encode())
    subs = []
    for i, rel in enumerate(submodules(top, spec) if commit else [], 1):
        sub = code_state(top / rel, role=f"{role}-submodule{i}", out_dir=out_dir, exclude=exclude)
        if sub is not None and Path(sub["folder"]).resolve() == (top / rel).resolve():
            subs.append({**sub, "path": rel})
            h.update(f"\nsubmodule {rel} {sub['code_hash']}".encode())
    state = {"role": role, "folder": str(top), "relative": str(Path(folder).resolve().relative_to(top.resolve()))
             if Path(folder).resolve().is_relative_to(top.resolve()) else ".",
             "commit": commit, "tree": tree, "branch": branch if branch != "HEAD" else None, "remote": strip_userinfo(remote) if remote else None,
             "pathspec": spec, "dirty": bool(patch) or bool(files), "patch": None, "patch_sha256": None, "untracked": listed,
             "untracked_archive": None, "untracked_skipped": skipped[:LISTED_SKIPPED], "untracked_skipped_count": len(skipped),
             "submodules": subs, "code_hash": h.hexdigest()[:16]}
    state["dirty"] = state["dirty"] or any(sub["dirty"] for sub in subs)
    if out_dir is not None and patch:
        atomic_write_bytes(out_dir / f"{role}.patch", patch)
        state["patch"], state["patch_sha256"] = f"code/{role}.patch", hashlib.sha256(patch).hexdigest()
    if out_dir is not None and files:
        atomic_write_bytes(out_dir / f"{role}-untracked.tar", _tar(files))
        state["untracked_archive"] = f"code/{role}-untracked.tar"
    return state


def submodules(top: Path, pathspec: list[str]) -> list[str]:
    """The paths of the checked-out submodules of the tree `top` (gitlinks in its index with a
    repository in their folder), nested ones through their own code state."""
    proc = git(top, "ls-files", "--stage", "-z", "--", *pathspec)
    out = []
    for entry in (proc.stdout.decode(errors="surrogateescape").split("\0") if proc and proc.returncode == 0 else []):
        meta, _, rel = entry.partition("\t")
        if meta.startswith("160000 ") and rel and (top / rel / ".git").exists():
            out.append(rel)
    return out


def envkit_folders(project: Path, runs_root: Path) -> list[Path]:
    """envkit's own folders in a project, never part of its code state (record, --check and
    reproduce alike): the runs folder and the managed environment (.envkit, or $ENVKIT_HOME)."""
    out = [Path(runs_root), Path(project) / ".envkit"]
    if os.environ.get("ENVKIT_HOME"):
        out.append(Path(os.environ["ENVKIT_HOME"]))
    return out


def tracked(top: Path, paths: list[Path]) -> set[Path]:
    """Those of `paths` git tracks in the tree `top` (their content is the code state's)."""
    rels = [str(p.resolve().relative_to(top.resolve())) for p in paths if p.resolve().is_relative_to(top.resolve())]
    if not rels:
        return set()
    out = _out(git(top, "ls-files", "--", *rels)) or ""
    return {(top / line).resolve() for line in out.splitlines() if line}
