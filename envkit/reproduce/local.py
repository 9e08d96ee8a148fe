"""The distributions a run had from a local folder or installed editable (your project after `pip
install -e .`, envkit from a checkout): no index has them, so the venv built from the lock lacks
them. Each is installed again after the locked wheels, from its code as the run had it (restore.py:
its folder where that is still in the recorded state, else the temporary worktree at the recorded
commit with the patch applied), with `pip install --no-deps` (an editable one stays editable), and
uninstalled when the reproduction ends: an editable install would point into a worktree that is
gone, and the venv is left holding exactly the lock, so a later reproduction may reuse it. A venv
given with --venv that reproduce did not build is yours: nothing is installed into it or removed
from it (an uninstall there would take your own `pip install -e .` away); its own copies are used.

One whose code cannot be put back (a folder outside git that is gone, a repository that lost the
commit, a build that fails) is named in one line, and the reproduction goes on without it: if the
run's code imports it, the reproduction's log says so."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _covering(folder: Path, rec: dict) -> dict | None:
    """The recorded code state whose git tree holds `folder` (the project's, envkit's or its own)."""
    for state in rec.get("code") or []:
        top = state.get("folder")
        if state.get("commit") and top and folder.resolve().is_relative_to(Path(top).resolve()):
            return state
    return None


def source(dist: dict, rec: dict, restored) -> tuple[Path | None, str | None]:
    """(the folder to install the distribution from, or None; the line that says what is not as the run had it)."""
    what = f"{dist['name']} {dist.get('version', '')}".strip()
    if not dist.get("folder"):
        return None, f"{what} was installed from a place envkit could not name: the reproduction goes on without it"
    folder = Path(dist["folder"])
    state = _covering(folder, rec)
    if state is not None:
        role = state.get("role")
        if role in restored.folders:
            return restored.path_for(folder), None
        return None, (f"{what} ({folder}): its code at commit {str(state['commit'])[:12]} cannot be put back"
                      f" ({restored.missing.get(role, 'not restored')}): the reproduction goes on without it")
    if folder.is_dir():
        return folder, (f"{what}: {folder} is not in git, so the run's code of it was not recorded: installed from the "
                        "folder as it is now")
    return None, f"{what} was installed from {folder}, which is gone and not in git: the reproduction goes on without it"


def install(rec: dict, python: str, restored, say) -> list[str]:
    """Install the run's local distributions into the venv of `python`; the names installed."""
    done = []
    for dist in (rec.get("environment") or {}).get("local") or []:
        folder, line = source(dist, rec, restored)
        if line:
            say(f"note: {line}")
        if folder is None:
            continue
        cmd = [python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
               *(["-e"] if dist.get("editable") else []), str(folder)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
        if proc.returncode != 0:
            why = ((proc.stderr or proc.stdout).strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            say(f"note: {dist['name']} could not be installed from {folder} ({why}): the reproduction goes on without it")
            continue
        say(f"local: {dist['name']} {dist.get('version', '')} installed{' editable' if dist.get('editable') else ''} "
            f"from {folder}")
        done.append(dist["name"])
    return done


def remove(python: str, names: list[str]) -> None:
    """Uninstall what `install` put in (the worktree an editable install points into is removed next)."""
    if names:
        subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", *names], capture_output=True, check=False, timeout=600)


def say_kept(rec: dict, venv: Path, say) -> None:
    """One line naming the run's local distributions that a venv given with --venv keeps as they are."""
    names = [str(d.get("name")) for d in (rec.get("environment") or {}).get("local") or []]
    if names:
        say(f"note: {', '.join(names)}: used as installed in {venv}, with its code as it is there now, not the run's (a venv "
            "of yours given with --venv is never changed; a new --venv folder is built with the run's code)")
