"""The code a run ran, put back: where a recorded git tree is not in the recorded state any more (HEAD
moved on, other uncommitted changes), a temporary `git worktree` at the run's commit with its patch
applied (`git apply --binary`) and its untracked files unpacked; removed again afterwards
(`git worktree remove --force`). A tree still in the recorded state is used where it is."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from envkit.record.code import code_state, git
from envkit.reproduce.check import CannotReproduce


class Restored:
    """The folders the code was put back in (role -> folder); `close()` removes the worktrees."""

    def __init__(self):
        self.folders: dict[str, Path] = {}
        self.recorded: dict[str, str] = {}  # role -> the folder the run's code was in
        self.missing: dict[str, str] = {}  # role -> why its code could not be put back (a local distribution's)
        self._worktrees: list[tuple[Path, Path]] = []  # (repository, worktree)

    def close(self) -> None:
        for repo, tree in self._worktrees:
            git(repo, "worktree", "remove", "--force", str(tree))
            shutil.rmtree(tree.parent, ignore_errors=True)
        self._worktrees.clear()

    def link_data(self, rec: dict) -> None:
        """Data the run read from inside its tree that git does not hold (an ignored data/ folder) is
        not in a worktree: linked there from where it is (its fingerprint was checked first)."""
        for d in rec.get("data") or []:
            original = Path(d["path"])
            here = self.path_for(original)
            if here != original.resolve() and not here.exists() and original.exists():
                here.parent.mkdir(parents=True, exist_ok=True)
                here.symlink_to(original, target_is_directory=original.is_dir())

    def path_for(self, original: str | Path) -> Path:
        """Where a path of a recorded tree lies now (inside a worktree when the tree was restored)."""
        p = Path(original).resolve()
        for role, folder in self.folders.items():
            base = Path(self.recorded[role]).resolve()
            if p.is_relative_to(base):
                return folder / p.relative_to(base)
        return p


def _unchanged(state: dict) -> bool:
    folder = Path(state["folder"]) / (state.get("relative") or ".")
    now = code_state(folder, role=state["role"], out_dir=None, pathspec=state.get("pathspec")) if folder.exists() else None
    return now is not None and now["code_hash"] == state["code_hash"]


def worktree(run_dir: Path, state: dict, out: Restored) -> Path:
    """A temporary worktree of the recorded repository at the run's commit, patched; its top folder."""
    repo, role = Path(state["folder"]), state["role"]
    if not repo.is_dir():
        raise CannotReproduce(f"the run's code ({role}) was in {repo}, which is gone", where=str(run_dir),
                              fix=f"clone the repository there again (commit {state['commit']})")
    tree = Path(tempfile.mkdtemp(prefix=f"envkit-reproduce-{role}-")) / "tree"
    proc = git(repo, "worktree", "add", "--detach", str(tree), state["commit"], timeout=600)
    if proc is None or proc.returncode != 0:
        why = (proc.stderr.decode(errors="replace").strip().splitlines() or ["git failed"])[-1] if proc else "git is not installed"
        raise CannotReproduce(f"cannot check out the run's commit {state['commit'][:12]} of {repo}: {why}", where=str(run_dir),
                              fix="fetch that commit into the repository (git fetch), then reproduce again")
    out._worktrees.append((repo, tree))
    if state.get("patch"):
        patch = run_dir / state["patch"]
        if not patch.is_file():
            raise CannotReproduce(f"the run's patch {state['patch']} is missing", where=str(run_dir),
                                  fix="the run folder is incomplete; its uncommitted changes cannot be put back")
        applied = git(tree, "apply", "--binary", "--whitespace=nowarn", str(patch.resolve()))
        if applied is None or applied.returncode != 0:
            raise CannotReproduce(f"the run's patch does not apply to commit {state['commit'][:12]}: "
                                  + (applied.stderr.decode(errors="replace").strip()[:200] if applied else "git failed"),
                                  where=str(patch), fix="the patch or the repository was changed; it cannot be put back")
    if state.get("untracked_archive"):
        from envkit.runfolder.archive import extract

        extract(run_dir / state["untracked_archive"], tree)  # with the caps it was written with
    return tree


def restore(run_dir: Path, rec: dict, say=print) -> Restored:
    """Every recorded git tree put back: the project's, envkit's and each local distribution's
    (`local-NAME`). A local distribution's that cannot be is named in `missing` (local.py goes on
    without it); the project's or envkit's is exit 2."""
    out = Restored()
    for state in rec.get("code") or []:
        role = state.get("role")
        if not role or not state.get("commit"):
            continue
        out.recorded[role] = state["folder"]
        if _unchanged(state):
            out.folders[role] = Path(state["folder"])
            continue
        try:
            tree = worktree(run_dir, state, out)
        except CannotReproduce as exc:
            if not role.startswith("local-"):
                raise
            out.missing[role] = exc.message
            continue
        out.folders[role] = tree
        say(f"code ({role}): {state['folder']} has moved on; the run's commit {state['commit'][:12]}"
            + (" with its uncommitted changes" if state.get("dirty") else "") + f" is checked out in {tree}")
    out.link_data(rec)
    return out
