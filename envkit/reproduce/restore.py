"""The code a run ran, put back: where a recorded git tree is not in the recorded state any more (HEAD
moved on, other uncommitted changes), a temporary `git worktree` at the run's commit with its patch
applied (`git apply --binary`), its untracked files unpacked and its submodules checked out the same
way (each a worktree of the submodule's own repository, at the commit the run had, patched); removed
again afterwards (`git worktree remove --force`). A tree still in the recorded state is used where it is.

Untracked files too large (or binary) to be kept in the run folder are linked into the worktree from
where they are, and said in one line; those gone are named before training. A recorded folder
inside the run folder is never used (record/code.py: InsideRunFolder, exit 2).

Every temporary folder (worktrees, run_config's train.yaml) is made by `temp_folder`, which writes
the PID that owns it: whatever the way out (an error in restore itself included), `Restored.close`
removes the worktrees; a reproduction that was killed leaves them, and the next one removes those of
dead processes and prunes git's worktree entries (`prune_leftovers`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from envkit.fsutil import process_start_time, same_process
from envkit.record.code import code_state, envkit_folders, git, refuse_inside_run
from envkit.reproduce.check import CannotReproduce
from envkit.runfolder.archive import extract
from envkit.runfolder.shown import shown, shown_list

TEMP_PREFIX = "envkit-reproduce-"
OWNER = "owner.json"


def temp_folder(what: str) -> Path:
    """A new temporary folder envkit-reproduce-WHAT-*, marked with this process (prune_leftovers)."""
    d = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{what}-"))
    (d / OWNER).write_text(json.dumps({"pid": os.getpid(), "start_time": process_start_time(os.getpid())}))
    return d


def prune_leftovers(repos: list[Path]) -> list[Path]:
    """The temporary folders of reproductions whose process is gone (killed), removed; then git's
    entries of worktrees that are gone pruned in each repository. The folders removed."""
    gone = []
    for d in Path(tempfile.gettempdir()).glob(TEMP_PREFIX + "*"):
        try:
            owner = json.loads((d / OWNER).read_text())
        except (OSError, ValueError):
            if _old_config_folder(d):
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d)
            continue  # not one of ours, or being made this instant
        if isinstance(owner, dict) and not same_process(owner.get("pid"), owner.get("start_time")):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d)
    for repo in repos:
        if repo.is_dir():
            git(repo, "worktree", "prune")
    return gone


def _old_config_folder(d: Path) -> bool:
    """A train.yaml folder an envkit before `temp_folder` left (it never removed them), a day old."""
    import time

    try:
        return [p.name for p in d.iterdir()] == ["train.yaml"] and time.time() - d.stat().st_mtime > 86400
    except OSError:
        return False


class Restored:
    """The folders the code was put back in (role -> folder); `close()` removes the worktrees."""

    def __init__(self):
        self.folders: dict[str, Path] = {}
        self.recorded: dict[str, str] = {}  # role -> the folder the run's code was in
        self.missing: dict[str, str] = {}  # role -> why its code could not be put back (a local distribution's)
        self._worktrees: list[tuple[Path, Path, Path | None]] = []  # (repository, worktree, its temporary folder)

    def close(self) -> None:
        """Every worktree removed (a submodule's before its parent's), its temporary folder, git's entry."""
        for repo, tree, temp in reversed(self._worktrees):
            git(repo, "worktree", "remove", "--force", str(tree))
            if temp is not None:
                shutil.rmtree(temp, ignore_errors=True)
        for repo in dict.fromkeys(repo for repo, _, _ in self._worktrees):
            git(repo, "worktree", "prune")
        self._worktrees.clear()

    def link_data(self, entries) -> list[str]:
        """Data the run read from inside its tree that git does not hold (an ignored data/ folder) is
        not in a worktree: linked there from where it is (its fingerprint was checked first). The
        command reads through the link and cannot write through it (ENVKIT_READ_ONLY, exec/opened.py)."""
        linked = []
        for d in entries:
            original = Path(d["path"])
            here = self.path_for(original)
            if here != original.resolve() and not here.exists() and original.exists():
                here.parent.mkdir(parents=True, exist_ok=True)
                here.symlink_to(original, target_is_directory=original.is_dir())
                linked.append(str(original))
        return linked

    def link_untracked(self, rec: dict, say) -> None:
        """The untracked files the run folder could not keep (too large, binary) linked into each
        worktree from where they are; one line names them, and one the files that are gone."""
        linked, changed, gone, unlisted = [], [], [], 0
        for state, tree in self._restored_states(rec):
            unlisted += max(0, int(state.get("untracked_skipped_count") or 0) - len(state.get("untracked_skipped") or []))
            for s in state.get("untracked_skipped") or []:
                rel = str(s.get("path") or "")
                if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
                    continue
                original, here = Path(state["folder"]) / rel, tree / rel
                if not os.path.lexists(original):
                    gone.append(f"{original} ({s.get('why')})")
                    continue
                if os.path.lexists(here):
                    continue
                here.parent.mkdir(parents=True, exist_ok=True)
                here.symlink_to(original, target_is_directory=original.is_dir())
                linked.append(str(original))
                try:
                    st = original.lstat()
                    if "size" in s and (st.st_size != s["size"] or int(st.st_mtime) != int(s.get("mtime", st.st_mtime))):
                        changed.append(str(original))
                except OSError:
                    pass
        if linked:
            say(f"untracked files the run folder does not keep (too large or binary), linked into the worktree from where "
                f"they are: {', '.join(linked[:10])}" + (f" and {len(linked) - 10} more" if len(linked) > 10 else "")
                + (f"; changed since the run (size or time): {', '.join(changed[:10])}" if changed else ""))
        if gone or unlisted:
            say("note: untracked files the run had that are not put back: "
                + ", ".join(gone[:10]) + (f" and {len(gone) - 10} more" if len(gone) > 10 else "")
                + (f"{'; ' if gone else ''}{unlisted} more not listed in the record" if unlisted else "")
                + ": if the run's code opens them, put them back where they were")

    def _restored_states(self, rec: dict):
        """(code state, the worktree it was checked out in) of each tree and submodule put back in a worktree."""
        def walk(state: dict, tree: Path):
            yield state, tree
            for sub in state.get("submodules") or []:
                if isinstance(sub, dict) and sub.get("path"):
                    yield from walk(sub, tree / sub["path"])

        for state in rec.get("code") or []:
            role = state.get("role")
            if role in self.folders and self.folders[role] != Path(state.get("folder") or ""):
                yield from walk(state, self.folders[role])

    def inside(self, original: str | Path) -> Path | None:
        """Where a path inside a recorded tree lies now (in its worktree when the tree was restored); None outside them."""
        return path_inside(original, {self.recorded[role]: folder for role, folder in self.folders.items()})

    def path_for(self, original: str | Path) -> Path:
        """Where a path of a recorded tree lies now (inside a worktree when the tree was restored)."""
        here = self.inside(original)
        return here if here is not None else Path(original).resolve()


def path_inside(original: str | Path, trees: dict[str, Path]) -> Path | None:
    """Where `original`, a path inside one of the recorded trees (recorded folder -> where its code
    lies now), lies now; None outside them. Links resolved or not, on either side."""
    p = Path(os.path.abspath(original))
    for cand in dict.fromkeys((p, p.resolve())):
        for recorded, tree in trees.items():
            for base in dict.fromkeys((Path(recorded), Path(recorded).resolve())):
                if cand.is_relative_to(base):
                    return tree / cand.relative_to(base)
    return None


def unchanged(state: dict, runs_root: Path | None = None) -> bool:
    """Whether the user's tree is in the state the run recorded, envkit's own folders left out as
    when it was recorded (then envkit's or a local package's code is used where it is)."""
    folder = Path(state["folder"]) / (state.get("relative") or ".")
    exclude = envkit_folders(Path(state["folder"]), runs_root) if runs_root is not None else []
    now = code_state(folder, role=state["role"], out_dir=None, pathspec=state.get("pathspec"), exclude=exclude) if folder.is_dir() else None
    return now is not None and now["code_hash"] == state["code_hash"]


def worktree(folder, code, out: Restored) -> Path:
    """A worktree of the recorded repository at the run's commit in the place the plan made for it
    (reproduce/plan.py: CodePlan), the snapshot's copy of the patch applied, its untracked files
    unpacked from the snapshot's copy of the archive, its submodules checked out in it."""
    state = code.state
    repo, role, tree = Path(state.folder), state.role, code.tree
    if not repo.is_dir():
        raise CannotReproduce(f"the run's code ({role}) was in {repo}, which is gone", where=str(folder.path),
                              fix=f"clone the repository there again (commit {state.commit})")
    if tree.is_dir() and not any(tree.iterdir()):
        tree.rmdir()  # the empty folder git leaves for a submodule
    proc = git(repo, "worktree", "add", "--detach", str(tree), _checkout_of(code), timeout=600)
    if proc is None or proc.returncode != 0:
        why = (proc.stderr.decode(errors="replace").strip().splitlines() or ["git failed"])[-1] if proc else "git is not installed"
        raise CannotReproduce(f"cannot check out the run's commit {str(state.commit)[:12]} of {repo}: {why}", where=str(folder.path),
                              fix="fetch that commit into the repository (git fetch), then reproduce again")
    out._worktrees.append((repo, tree, code.temp))
    if state.patch:
        patch = folder.copy(state.patch)  # the snapshot's bytes, which the plan listed
        applied = git(tree, "apply", "--binary", "--whitespace=nowarn", str(patch)) if patch is not None else None
        if applied is None or applied.returncode != 0:
            raise CannotReproduce(f"the run's patch does not apply to commit {str(state.commit)[:12]}: "
                                  + (applied.stderr.decode(errors="replace").strip()[:200] if applied else "git failed"),
                                  where=str(folder.file(state.patch)), fix="the patch or the repository was changed; it cannot be put back")
    if state.untracked_archive:
        archive = folder.copy(state.untracked_archive)
        if archive is None:
            raise CannotReproduce("the run's untracked files' archive is missing", where=str(folder.path),
                                  fix="the run folder is incomplete")
        extract(archive, tree)  # with the caps it was written with, never through a link, never over a file
    for sub in code.submodules:
        refuse_inside_run(sub.state.folder, f"code folder (submodule {sub.state.path})", folder.path)
        worktree(folder, sub, out)
    return tree


def _checkout_of(code) -> str:
    """The commit to check out: the run's, or where it is gone (plan.py: commit_gone), a commit made
    now of the run's tree (the same content; a dangling object git prunes in time)."""
    state = code.state
    if not code.from_tree:
        return str(state.commit)
    made = git(Path(state.folder), "-c", "user.name=envkit", "-c", "user.email=envkit@localhost", "commit-tree", str(state.tree),
               "-m", f"envkit reproduce: the tree of {state.commit}, a commit that is gone")
    sha = made.stdout.decode().strip() if made is not None and made.returncode == 0 else ""
    if not sha:
        raise CannotReproduce(f"cannot make a commit of the run's tree {str(state.tree)[:12]} in {state.folder}",
                              where=str(state.folder), fix=f"fetch the run's commit {state.commit}, then reproduce again")
    return sha


def restore(plan, say=print) -> Restored:
    """Every recorded tree put back where the plan placed it: the project's, envkit's and each local
    distribution's (`local-NAME`). A local distribution's that cannot be is named in `missing`
    (local.py goes on without it); the project's or envkit's is exit 2. Whatever fails here,
    nothing is left behind."""
    out = Restored()
    rec = plan.record.to_json()
    try:
        prune_leftovers([Path(c.state.folder) for c in plan.code])
        for code in plan.code:
            role = code.state.role
            out.recorded[role] = code.state.folder
            if code.in_place:
                out.folders[role] = code.tree
                continue
            try:
                tree = worktree(plan.folder, code, out)
            except CannotReproduce as exc:
                if not role.startswith("local-"):
                    raise
                out.missing[role] = exc.message
                continue
            out.folders[role] = tree
            subs = [s.state.path for s in code.submodules]
            say(f"code ({role}): " + (f"{shown(code.state.folder)} has moved on; " if code.moved else "")
                + f"the run's commit {str(code.state.commit)[:12]}"
                + (f" (gone from the repository: a commit of its tree {str(code.state.tree)[:12]})" if code.from_tree else "")
                + (" with its uncommitted changes" if code.state.dirty else "")
                + (f" and its submodules ({shown_list(subs)}) at their commits" if subs else "") + f" is checked out in {tree}"
                + ("" if code.moved else ": the reproduction writes there, never into your tree"))
        data = plan.folder.data
        linked = out.link_data(data)
        if data:
            say(f"data: {len(data)} path(s) the run named or read, unchanged since (fingerprints checked)"
                + (f"; linked read-only into the worktree: {shown_list(linked)}" if linked else ""))
        out.link_untracked(rec, say)
    except BaseException:
        out.close()
        raise
    return out
