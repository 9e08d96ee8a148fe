"""What a reproduction will do, decided once from the run folder's snapshot (runfolder/snapshot.py)
before anyone is asked: the command and working directory as they will run, every code folder with
its commit and the files its patch and archive change (asked of git and tarfile, from the same
bytes that will be applied), every package and where it comes from, the imports the config names,
the process count and the variables set. The screen (consent.py) is drawn from this object, and
after the answer only this object and the snapshot are used: nothing in the run folder is read
again, and what runs is what was shown.

Worktrees are placed before the question (empty temporary folders, removed again by `close`), so
the paths on the screen are the paths that run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from envkit.checks.gates import gates
from envkit.errors import EnvkitError
from envkit.install.lock.read import LockFile, read
from envkit.record.code import GIT_ENV, git, refuse_inside_run
from envkit.reproduce.check import CannotReproduce, refuse_inside
from envkit.reproduce.elsewhere import differences
from envkit.reproduce.metrics import rows_of
from envkit.reproduce.restore import path_inside, temp_folder, unchanged
from envkit.reproduce.venv import HOME, default_venv, python_of
from envkit.runfolder.archive import checked_members
from envkit.runfolder.bounded import RunFolderError
from envkit.runfolder.records import MAX_PROCESSES, CodeState, RunRecord
from envkit.runfolder.names import LOCK, METRICS, RECORD
from envkit.exec.opened import READ_ONLY_VAR
from envkit.track import STOP_VAR
from envkit.runfolder.snapshot import RunSnapshot

_IMPORT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")  # `package.module:factory`, as train/user_code.py imports it
_COUNT = re.compile(r"[1-9][0-9]{0,5}")


@dataclass
class CodePlan:
    """One recorded tree (or a submodule in it) and where its code will be."""

    state: CodeState
    in_place: bool  # the user's tree is in the recorded state: used where it is
    tree: Path  # where the run's code of it lies during the reproduction
    temp: Path | None  # the worktree's temporary folder (placed now)
    patch_files: list[str] = field(default_factory=list)  # as `git apply --numstat` reads the patch
    patch_links: list[str] = field(default_factory=list)  # symbolic links the patch creates
    archive_files: list[str] = field(default_factory=list)  # as tarfile reads the archive
    submodules: list[CodePlan] = field(default_factory=list)
    from_tree: bool = False  # the commit is gone from the repository, its tree is not: a commit of that tree is checked out
    moved: bool = True  # the user's tree is no longer in the recorded state (else it is checked out all the same: the run writes there)

    def all(self) -> list[CodePlan]:
        return [self, *(s for sub in self.submodules for s in sub.all())]


@dataclass
class Plan:
    folder: RunSnapshot
    record: RunRecord
    lock: LockFile
    lock_path: Path  # the snapshot's private copy
    kind: str
    command: list[str]  # an exec run's command as it will run (paths into restored trees rewritten); [] for `run`
    cwd: Path
    code: list[CodePlan]
    venv: Path
    venv_given: bool
    env: dict[str, str]  # set for the training process, beside the current environment
    processes: int
    profile: str | None
    imports: list[str]  # `module:attr` values in the config: imported and called when it trains
    data: list[str]  # the paths whose fingerprints are checked before anything trains
    steps_compared: int
    verdict_facts: dict  # what the verdict reads from summary.json
    other_machine: list[str]  # how the machine the lock names differs from this one
    temps: list[Path] = field(default_factory=list)
    threads_notes: list[str] = field(default_factory=list)
    threads: tuple[str, ...] = ()  # the names in `env` that are the run's thread counts

    def close(self) -> None:
        """The folders placed for worktrees removed (restore.py removes the worktrees themselves)."""
        for t in self.temps:
            shutil.rmtree(t, ignore_errors=True)

    @property
    def folders(self) -> dict[str, Path]:
        return {c.state.role: c.tree for c in self.code}

    def inside(self, original: str | Path) -> Path | None:
        """Where a path inside a recorded tree lies during the reproduction; None outside them."""
        return path_inside(original, {c.state.folder: c.tree for c in self.code})

    def argv_for(self, argv: list[str]) -> list[str]:
        """Each absolute path inside a recorded tree (`python /repo/train.py`, `--config=/repo/c.yaml`)
        rewritten into where that tree's code lies: the run's copy runs, not today's file."""
        out = []
        for arg in argv:
            head, eq, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
            if os.path.isabs(value):
                here = self.inside(value)
                if here is not None:
                    arg = f"{head}{eq}{here}"
            out.append(arg)
        return out


def make(folder: RunSnapshot, *, venv: Path | None, steps: int | None, device: str | None, facts=None) -> Plan:
    """Every decision of the reproduction, from the snapshot alone."""
    record = folder.record
    if record is None:
        raise CannotReproduce(f"the run has no {RECORD}: it was started by an envkit that did not record runs",
                              where=str(folder.path), fix="start the run again with this envkit; its folder will hold the record")
    lock_path = folder.copy(LOCK)
    if lock_path is None:
        raise CannotReproduce(f"the run has no {LOCK} ({'; '.join(record.errors) or 'not written'})",
                              where=str(folder.path), fix="the environment the run used cannot be rebuilt; start the run again")
    lock = _lock(lock_path, folder)
    refuse_inside(folder, record, lock)
    temps: list[Path] = []
    try:
        code = [_code(folder, s, temps) for s in record.code if s.commit]
        plan = Plan(folder=folder, record=record, lock=lock, lock_path=lock_path, kind=record.kind, command=[],
                    cwd=Path("/"), code=code, venv=Path(venv).resolve() if venv else default_venv(lock_path), venv_given=venv is not None,
                    env={}, processes=_processes(folder, record), profile=_profile(folder, record),
                    imports=_imports(record.config.get("declared") or {}), data=[str(d.get("path")) for d in folder.data],
                    steps_compared=len(_steps(folder)), verdict_facts=_verdict_facts(folder),
                    other_machine=_other_machine(lock, facts), temps=temps)
        plan.cwd = _cwd(plan, temps)
        plan.env = _env(plan, steps, device)
        if record.kind == "exec":
            plan.command = exec_command(list(record.command), record.python, plan.venv, plan.argv_for)
        return plan
    except BaseException:
        for t in temps:
            shutil.rmtree(t, ignore_errors=True)
        raise


def _lock(path: Path, folder: RunSnapshot) -> LockFile:
    try:
        return read(path, require_torch=False)
    except EnvkitError as exc:
        raise CannotReproduce(f"the run's {LOCK} does not read: {exc.message}", where=str(folder.file(LOCK)),
                              fix="the run folder was changed; its environment cannot be rebuilt") from None


def _steps(folder: RunSnapshot) -> dict:
    return rows_of(folder.files.get(METRICS, b""))


def _code(folder: RunSnapshot, state: CodeState, temps: list[Path], sub_tree: Path | None = None) -> CodePlan:
    """Where one recorded tree's code will be, and what its patch and archive hold."""
    if not sub_tree:
        refuse_inside_run(state.folder, f"code folder ({state.role})", folder.path)
    same = sub_tree is None and unchanged(state.to_json(), folder.path.parent.parent)
    if same and state.role != "project":  # envkit's own code, a local package: imported, never written to
        plan = CodePlan(state=state, in_place=True, tree=Path(state.folder), temp=None)
    elif sub_tree is None:
        if not Path(state.folder).is_dir():
            if state.role.startswith("local-"):
                return CodePlan(state=state, in_place=False, tree=Path(state.folder), temp=None)
            raise CannotReproduce(f"the run's code ({state.role}) was in {state.folder}, which is gone", where=str(folder.path),
                                  fix=f"clone the repository there again (commit {state.commit})")
        temp = temp_folder(state.role)
        temps.append(temp)
        plan = CodePlan(state=state, in_place=False, tree=temp / "tree", temp=temp, moved=not same)
    else:
        plan = CodePlan(state=state, in_place=False, tree=sub_tree, temp=None)
    if plan.in_place:
        return plan
    plan.from_tree = commit_gone(state, folder)
    if state.patch:
        patch = folder.copy(state.patch)
        if patch is None:
            raise CannotReproduce(f"the run's patch {state.patch} is missing", where=str(folder.path),
                                  fix="the run folder is incomplete; its uncommitted changes cannot be put back")
        plan.patch_files, plan.patch_links = patch_contents(patch, folder)
    if state.untracked_archive:
        archive = folder.copy(state.untracked_archive)
        if archive is None:
            raise CannotReproduce(f"the run's untracked files' archive {state.untracked_archive} is missing",
                                  where=str(folder.path), fix="the run folder is incomplete; its untracked files cannot be put back")
        plan.archive_files = archive_contents(archive, state, folder)
    for sub in state.submodules:
        if sub.commit and sub.path:
            plan.submodules.append(_code(folder, sub, temps, sub_tree=plan.tree / sub.path))
    return plan


def commit_gone(state: CodeState, folder: RunSnapshot) -> bool:
    """Whether the run's commit is gone from its repository while its tree is there (an amend, a
    rebase, a gc: the content is the same, the commit not); a commit gone with its tree is one line,
    exit 2, before anything is built, naming the commit and how to get it back."""
    repo = Path(state.folder)
    if not repo.is_dir() or _has(repo, f"{state.commit}^{{commit}}"):
        return False  # a repository that is gone is named by restore, as before
    if state.tree and _has(repo, f"{state.tree}^{{tree}}"):
        return True
    raise CannotReproduce(f"the run's commit {str(state.commit)[:12]} is not in {repo}"
                          + (" and neither is its tree (the content changed, or the objects were pruned)" if state.tree else ""),
                          where=str(folder.path),
                          fix=f"fetch it (git -C {repo} fetch origin {state.commit}), or restore the branch that had it, then reproduce again")


def _has(repo: Path, spec: str) -> bool:
    proc = git(repo, "cat-file", "-e", spec)
    return proc is not None and proc.returncode == 0


def patch_contents(patch: Path, folder: RunSnapshot) -> tuple[list[str], list[str]]:
    """(every file the patch changes, the symbolic links it creates), as git itself reads it
    (`git apply --numstat --summary`, outside any repository): a plain unified diff counts too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | GIT_ENV
    env["GIT_CEILING_DIRECTORIES"] = str(patch.parent.parent)
    try:
        proc = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "apply", "--numstat", "--summary", "-z", str(patch)],
                              cwd=patch.parent, env=env, capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CannotReproduce(f"git cannot read the run's patch: {exc}", where=str(folder.path), fix="install git") from None
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip()[:200]
        raise CannotReproduce(f"the run's patch {patch.name} is not one git applies ({why})", where=str(folder.path),
                              fix="the run folder was changed; its uncommitted changes cannot be put back")
    files, links = [], []
    parts = proc.stdout.split(b"\0")
    i = 0
    while i < len(parts):
        item = parts[i].decode(errors="replace")
        i += 1
        if not item:
            continue
        if item.count("\t") == 2:  # numstat: added, deleted, path ("" and two more names for a rename)
            path = item.split("\t", 2)[2]
            if path == "" and i + 1 < len(parts):
                path = f"{parts[i].decode(errors='replace')} -> {parts[i + 1].decode(errors='replace')}"
                i += 2
            files.append(path)
        else:  # --summary lines ("create mode 120000 link", " mode change ...")
            for line in item.splitlines():
                m = re.match(r"\s*(?:create|mode change \d+ =>) mode 120000 (.*)$", line) or re.match(
                    r"\s*mode change \d+ => 120000 (.*)$", line)
                if m:
                    links.append(m.group(1))
    return files, links


def archive_contents(archive: Path, state: CodeState, folder: RunSnapshot) -> list[str]:
    """The archive's members as tarfile reads them (with the caps they were written with); they must
    be the untracked files the record lists, no more and no others."""
    try:
        with tarfile.open(archive, mode="r:") as tar:
            members = [m.name for m in checked_members(tar, str(folder.file(state.untracked_archive or "")))]
    except tarfile.TarError as exc:
        raise RunFolderError(f"the untracked files' archive is not an uncompressed tar envkit wrote ({exc})",
                             where=str(folder.file(state.untracked_archive or "")), fix="use the run folder as envkit wrote it") from None
    listed = set(state.untracked)
    unlisted = [m for m in members if m not in listed]
    if unlisted:
        raise RunFolderError(f"the untracked files' archive holds {len(unlisted)} file(s) the record does not list "
                             f"({unlisted[0]!r} first)", where=str(folder.file(state.untracked_archive or "")),
                             fix="the run folder was changed; its untracked files cannot be put back as envkit wrote them")
    return members


def _imports(declared: dict) -> list[str]:
    out = []
    for section, values in declared.items():
        if isinstance(values, dict):
            for key, value in values.items():
                if isinstance(value, str) and _IMPORT.match(value):
                    out.append(f"{section}.{key} = {value}")
    return out


def _processes(folder: RunSnapshot, record: RunRecord) -> int:
    """The run's process count: the sealed record's; a record from before it kept one: summary.json's world_size."""
    world = record.processes
    if world is None:
        world = folder.summary.get("world_size")
    if not isinstance(world, int) or isinstance(world, bool) or not 1 <= world <= MAX_PROCESSES:
        return 1
    return world


def _profile(folder: RunSnapshot, record: RunRecord) -> str | None:
    saved = folder.config.get("profile")
    return record.profile or (saved if isinstance(saved, str) else None)


def _verdict_facts(folder: RunSnapshot) -> dict:
    s = folder.summary
    return {k: s.get(k) for k in ("device", "device_name", "precision", "world_size") if s.get(k) is not None}


def _other_machine(lock: LockFile, facts) -> list[str]:
    if facts is None:
        return []
    try:
        return differences(lock, facts)
    except (KeyError, TypeError, ValueError):
        return []


def _cwd(plan: Plan, temps: list[Path]) -> Path:
    """The run's working directory, in its tree's code when it lay in a recorded tree (the same
    relative folder); a folder outside the trees as it is; never inside the run folder. An `envkit
    run` run without one (its paths are absolute): an empty private folder, where nothing can
    shadow envkit's own modules."""
    recorded = plan.record.cwd
    if recorded:
        refuse_inside_run(recorded, "working directory", plan.folder.path)
        here = plan.inside(recorded)
        if here is not None:
            return here
        if Path(recorded).is_dir():
            return Path(recorded)
    if plan.kind == "run":
        empty = temp_folder("cwd") / "cwd"
        empty.mkdir()
        temps.append(empty.parent)
        return empty
    raise CannotReproduce(f"the run's working directory {recorded or '(not recorded)'} is not on this machine",
                          where=str(plan.folder.path),
                          fix="make that folder again (or clone the run's repository there), then reproduce again")


def _env(plan: Plan, steps: int | None, device: str | None) -> dict[str, str]:
    """The variables set for the training process (beside the current environment)."""
    env = {"ENVKIT_HOME": str(plan.venv / HOME)}
    envkit_tree = plan.folders.get("envkit")
    if envkit_tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(envkit_tree), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
    read_only = _read_only(plan)
    if read_only:
        env[READ_ONLY_VAR] = os.pathsep.join(read_only)
    if plan.kind == "exec" and steps is not None:
        env[STOP_VAR] = str(steps)  # envkit.track.log ends the script once it logs step N
    if not plan.other_machine and device is None:
        threads = _threads(plan)
        plan.threads = tuple(threads)
        env.update(threads)
    return env


def _read_only(plan: Plan) -> list[str]:
    """What the command may read but never open for writing (envkit/exec/opened.py): the user's
    trees checked out elsewhere, and the data it read outside them, which it uses where it lies."""
    trees = [c.state.folder for c in plan.code if not c.in_place]
    outside = [d for d in plan.data if plan.inside(d) is None]
    return list(dict.fromkeys([*trees, *outside]))


def _threads(plan: Plan) -> dict[str, str]:
    """The thread counts the run had (OMP_NUM_THREADS and friends, from its environment.json): on
    the CPU they are part of the arithmetic (how a sum is split between threads). Only a count is
    applied, never more than this machine's cores."""
    try:
        recorded = plan.folder.environment.environ
    except RunFolderError:
        return {}
    cores = os.cpu_count() or 1
    out = {}
    for name in gates()["env"]["threads"]["names"]:
        value = recorded.get(name)
        if value is None:
            continue
        if not _COUNT.fullmatch(value):
            plan.threads_notes.append(f"not applied, not a thread count: {name}")
            continue
        if int(value) > cores:
            plan.threads_notes.append(f"{name}={value} capped at this machine's {cores} cores")
            value = str(cores)
        if os.environ.get(name) != value:
            out[name] = value
    return out


def in_venv(command: list[str], recorded_python: str | None, venv: Path) -> list[str]:
    """The command with the run's interpreter, named by its absolute path, replaced by the
    reproduction venv's: the run's packages are that venv's now (a bare `python` finds it on PATH)."""
    if command and recorded_python and Path(command[0]).is_absolute():
        same = command[0] == recorded_python or Path(command[0]).parent == Path(recorded_python).parent
        if same and Path(command[0]).name.startswith("python"):
            return [python_of(venv), *command[1:]]
    return command


def exec_command(command: list[str], recorded_python: str | None, venv: Path, argv_for) -> list[str]:
    """An exec run's command as the reproduction runs it: the run's interpreter replaced by the venv's
    (in_venv), then the run's own paths moved into its trees' checkouts (Plan.argv_for). The venv's
    interpreter stays where it is, even inside a recorded tree (`--venv .venv` of a project): the
    checkout holds no venv."""
    swapped = in_venv(command, recorded_python, venv)
    interpreter = swapped[:1] if swapped[:1] == [python_of(venv)] else []
    return interpreter + argv_for(swapped[len(interpreter):])


def python_for(plan: Plan) -> str:
    return python_of(plan.venv)


def local_index(url: str) -> bool:
    return urlsplit(url).scheme in ("", "file")


