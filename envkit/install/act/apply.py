"""Act: create the venv if needed, install, verify in the target, and put the previous package set
back exactly when any of it fails or is interrupted (rollback.py hard-links the old files aside)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from envkit.errors import EnvkitError
from envkit.install.act import execute, rollback
from envkit.install.act.plan import Installer, venv_command

if TYPE_CHECKING:
    from envkit.install.act.execute import VerifyDevice

Say = Callable[..., None]  # say(text, err=False)


def install_with_rollback(venv: Path, venv_python: str, base_python: str, installer: Installer, create: bool, cmd: list[str],
                          versions: dict[str, str], device: VerifyDevice, say: Say, after=None, torch: bool = True) -> None:
    """Create the venv if needed, install with rollback on failure or Ctrl-C, verify (`torch=False`:
    a lock without torch, a run's interpreter that never had it: the versions are checked by pip)."""
    if create:
        say(f"creating the venv {venv}", err=True)
        try:
            execute.run_step(venv_command(installer, base_python, str(venv)), "creating the venv")
        except (execute.StepFailed, KeyboardInterrupt) as exc:
            import shutil

            shutil.rmtree(venv, ignore_errors=True)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise EnvkitError(str(exc), fix="check that the --python interpreter can create venvs (python3-venv on Debian/Ubuntu)")
    backup = rollback.take(venv_python, venv / ".envkit-rollback")
    try:
        say("installing: " + " ".join(cmd), err=True)
        execute.run_step(cmd, "the install")
        if after:
            after()
        result: dict = {"ok": True}
        if torch:
            say("verifying in " + venv_python, err=True)
            result = execute.verify(venv_python, versions, device)
        if not result["ok"]:
            raise execute.StepFailed("verification failed: " + "; ".join(result["problems"]))
    except (execute.StepFailed, KeyboardInterrupt) as exc:
        say("putting the environment back as it was before ...", err=True)
        diffs = rollback.restore(venv_python, backup)
        backup.discard()
        back = ("the environment was put back exactly as it was (" + (f"{len(backup.before)} packages" if backup.before else "empty") + ")"
                if not diffs else "could not put back: " + ", ".join(f"{n} {a} -> {b}" for n, (a, b) in sorted(diffs.items())))
        if isinstance(exc, KeyboardInterrupt):
            say(f"envkit: interrupted; {back}", err=True)
            raise
        raise EnvkitError(f"{exc}; {back}", fix="read the installer output above; the previous environment keeps working")
    backup.discard()


def verify_device(choice) -> VerifyDevice:
    if choice.device == "cpu" and choice.local:
        return "cpu-only"
    return choice.device
