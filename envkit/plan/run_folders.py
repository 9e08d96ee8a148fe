"""Run folders: runs/<experiment.name>/<run-id>/ under experiment.output_dir, chosen before
anything is written.
- `--run-id ID` names the folder; if it exists and is unfinished it is resumed.
- Without it (and without `--resume never`) the newest unfinished run of the experiment whose
  config hash matches is resumed; otherwise a new run-id (a timestamp) is made.
- `--resume PATH` continues from that checkpoint file, in its run folder.
A folder is resumed only with the config it started with (its config.json's hash)."""

from __future__ import annotations

import re
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.config.config import Config, where_set
from envkit.plan.model import Resume, RunState
from envkit.fsutil import check_inside, check_name
from envkit.runfolder.create import folder_name
from envkit.runfolder.links import refuse_links
from envkit.runfolder.folder import RunFolder


def runs_root(cfg: Config, base: Path | None = None) -> Path:
    """experiment.output_dir: the folder every run folder of this config must be inside."""
    return (base or Path.cwd()) / cfg.experiment.output_dir


def experiment_dir(cfg: Config, base: Path | None = None) -> Path:
    """runs/<experiment.name>/, the name made a slug (spaces and the like become '-'); a name that is
    not one folder name ('..', '/') was refused when the config was read (config.py), and is again
    here, with the folder checked to be inside the runs folder."""
    e = cfg.experiment
    where = where_set(cfg, "experiment.name")
    check_name(e.name, where, "experiment.name")
    name = re.sub(r"[^\w.-]+", "-", e.name).strip("-") or "experiment"
    check_name(name, where, "experiment.name")
    root = runs_root(cfg, base)
    return check_inside(root, root / name, where)


def run_dir_inside(cfg: Config, run_dir: Path, where: str) -> Path:
    """The chosen run folder, checked to be inside runs/<experiment>/ before anything is written."""
    return check_inside(experiment_dir(cfg), run_dir, where)



def choose_run_dir(cfg: Config, run_id: str | None, resume: Resume) -> tuple[Path, bool, str | None]:
    """(run folder, resuming?, note)."""
    exp = experiment_dir(cfg)
    h = cfg.config_hash()
    if resume not in ("auto", "never"):
        ck = Path(resume).resolve()
        if not (ck.is_file() or (ck.is_dir() and ck.suffix == ".dcp")):
            raise EnvkitError("checkpoint not found", where=f"--resume {resume}",
                              fix="give a checkpoints/step_*.pt file or step_*.dcp folder, auto or never")
        return ck.parent.parent, True, f"resuming from {ck}"
    if run_id:
        d = check_inside(exp, exp / folder_name(run_id, "--run-id", "run id"), "--run-id")
        folder = RunFolder(d)
        if folder.config_file.exists():
            if resume == "never":
                raise EnvkitError(f"run folder {d} exists", where="--run-id", fix="choose another --run-id, or drop --resume never to continue it")
            s = folder.summary()
            if s is not None and s.completed:
                raise EnvkitError(f"run {run_id} already completed {s.steps} steps", where=str(d),
                                  fix="choose another --run-id (or raise training.max_steps in a new run)")
            return d, True, None
        return d, False, None
    if resume == "auto" and exp.is_dir():
        candidates = sorted((RunFolder(p) for p in exp.iterdir() if RunFolder(p).is_run()), key=lambda f: f.path.stat().st_mtime,
                            reverse=True)
        for folder in candidates:
            d = folder.path
            if folder.completed():
                continue
            saved = folder.config()
            if saved.get("config_hash") == h:
                return d, True, f"resuming unfinished run {d.name} (same config; --resume never starts a new one)"
            return new_run(exp), False, f"not resuming {d.name}: its config differs (hash {saved.get('config_hash')} != {h})"
    return new_run(exp), False, None


def new_run(exp: Path) -> Path:
    """The new run's folder, chosen now and made when its first file is written (launch/launcher.py)."""
    return next(d for d in RunFolder.names_in(exp) if not d.exists())


def run_state(cfg: Config, run_dir: Path) -> RunState:
    """A sweep's run folder: new, resume or completed; one started with another config is refused
    (nothing is overwritten)."""
    folder = RunFolder(run_dir)
    if not folder.is_run():
        return "new"
    saved = folder.config()
    if saved.get("config_hash") != cfg.config_hash():
        raise EnvkitError(f"{run_dir} was started with a different config (hash {saved.get('config_hash')}, "
                          f"now {cfg.config_hash()})", where=str(run_dir),
                          fix="restore the config it ran with, set another experiment.name, or move that folder away")
    return "completed" if folder.completed() else "resume"


def place_combination(cfg: Config, run_name: str, config: str) -> tuple[Path, RunState]:
    """(run folder, state) of a sweep's combination: runs/<experiment>/<run_name>/."""
    exp = experiment_dir(cfg)
    run_dir = check_inside(exp, exp / check_name(run_name, f"{config}: sweep.grid", "run name"), f"{config}: sweep.grid")
    return run_dir, run_state(cfg, run_dir)


def choose_for_run(cfg: Config, run_id: str | None, resume: Resume) -> tuple[Path, bool, str | None, dict]:
    """choose_run_dir, checked before anything is read or written there: no symlink planted where
    envkit writes, and a resumed folder's config.json (returned) of this config."""
    run_dir, resuming, note = choose_run_dir(cfg, run_id, resume)
    if run_dir.is_dir():
        refuse_links(run_dir)
    return run_dir, resuming, note, check_resumable(cfg, run_dir) if resuming else {}


def check_resumable(cfg: Config, run_dir: Path) -> dict:
    """The config.json of a run folder about to be resumed, refused when it was another config."""
    saved = RunFolder(run_dir).config()
    if saved.get("config_hash") != cfg.config_hash():
        raise EnvkitError(f"run {run_dir.name} was started with a different config (hash {saved.get('config_hash')})",
                          where=str(run_dir), fix="restore that config, use another --run-id, or --resume never")
    return saved
