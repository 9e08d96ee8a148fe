"""The parent side of `envkit run` (no torch here): resolve the config against the profile, hold it
against the machine (doctor's checks), choose the run folder, write config/environment files, and
start the trainer as a child of the managed environment's Python (or this interpreter) with the
profile's environment set before that Python starts; torchrun for several GPUs.

Run folders: runs/<experiment.name>/<run-id>/ under experiment.output_dir.
- `--run-id ID` names the folder; if it exists and is unfinished it is resumed.
- Without it (and without `--resume never`) the newest unfinished run of the experiment whose
  config hash matches is resumed; otherwise a new run-id (a timestamp) is made.
- `--resume PATH` continues from that checkpoint file, in its run folder.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.train.data.paths import resolve_path
from envkit.train.run.config import Config, load_config, to_yaml
from envkit.train.run.spawn import PARENT_FD_ENV, ask_to_checkpoint, die_with_parent, release_child, spawn_child  # noqa: F401 (sweep, exec)

FINISHED = ("completed",)


@dataclass
class Plan:
    cfg: Config
    facts: object
    profile: object | None
    profile_note: str | None
    python: str
    managed: object | None
    notes: list[str] = field(default_factory=list)


def _load_profile(name: str | None, facts, explicit: bool):
    """(profile or None, note)."""
    from envkit.profiles import load_profile

    try:
        return load_profile(name, facts=facts), None
    except EnvkitError:
        if explicit:
            raise
        return None, f"profile {name!r} could not be loaded: built-in defaults"


def plan(config_path: str | None, *, overrides=(), profile_name: str | None = None, replay: str | None = None,
         python: str | None = None) -> Plan:
    """Everything before the run: config resolved with the profile, facts of the machine."""
    from envkit.facts import gather
    from envkit.install.setup.managed import find_managed

    managed = None if replay else find_managed()
    py = python or (str(managed.python) if managed else sys.executable)
    facts = gather(replay, runtime=False, gpu_detail=False, python=None if replay else py)
    explicit = profile_name is not None
    if profile_name is None:
        profile_name = managed.profile if managed and managed.profile else None
    if profile_name is None:
        from envkit.checks.recommend import recommend_profile

        profile_name = recommend_profile(facts)[0]
    profile, note = _load_profile(profile_name, facts, explicit)
    cfg = load_config(config_path, overrides=list(overrides), profile=profile)
    p = Plan(cfg, facts, profile, note, py, managed)
    if profile is not None:
        p.notes.extend(getattr(profile, "warnings", []) or [])
    return p


def hold_against_machine(cfg: Config, facts) -> list[str]:
    """Refuse a device/precision this machine cannot do, naming the doctor check; returns warnings."""
    from envkit.checks import run_checks, trainer_device

    checks = {c.id: c for c in run_checks(facts)}
    best = trainer_device(facts)
    dev = cfg.values["device"]["type"]
    dev_where = _where(cfg, "device.type")
    real = best if dev == "auto" else dev
    warnings = []

    def refuse(check_id: str, what: str, where: str):
        c = checks.get(check_id)
        msg = c.message if c else "not available"
        fix = (c.fix if c and c.fix else None) or f"run `envkit doctor`; or set {where.split(': ')[-1]} to a supported value"
        raise EnvkitError(f"{what} cannot run here: {msg} (doctor check '{check_id}')", where=where, fix=fix)

    torch_check = checks.get("torch")
    if torch_check is not None and torch_check.status == "fail":
        raise EnvkitError(f"no usable PyTorch: {torch_check.message} (doctor check 'torch')", where="environment",
                          fix=torch_check.fix or "`envkit setup` creates an environment with the right torch build")
    if real in ("mps", "cuda") and real != best:
        refuse(real, f"device.type {real}", dev_where)
    prec = cfg.values["training"]["precision"]
    if prec == "bf16" and real in ("mps", "cuda"):
        c = checks.get("bf16")
        if c is not None and c.status not in ("pass",):
            refuse("bf16", f"training.precision bf16 on {real}", _where(cfg, "training.precision"))
    if real in ("mps", "cuda") and checks.get(real) is not None and checks[real].status == "fail":
        refuse(real, f"device.type {real}", dev_where)
    if prec == "fp16" and real == "mps":
        from envkit.checks.gates import V, gates

        need = gates()["autocast"]["mps"]["fp16_torch"]
        tv = V(facts.torch.base_version)
        if tv is not None and tv < V(need):
            raise EnvkitError(f"fp16 autocast on MPS needs torch {need}+ (installed {facts.torch.base_version})",
                              where=_where(cfg, "training.precision"), fix="`envkit setup --torch stable`, or training.precision: fp32")
    comp = cfg.values["training"]["compile"]
    c = checks.get("compile")
    if comp is True and c is not None and c.status == "warn":
        warnings.append(f"training.compile: true, but {c.message}; the trainer falls back to eager if compilation fails")
    return warnings


def _where(cfg: Config, path: str) -> str:
    from envkit.train.run.config import _where as w

    return w(cfg, path)


# ---------------------------------------------------------------- run folders


def runs_root(cfg: Config, base: Path | None = None) -> Path:
    """experiment.output_dir: the folder every run folder of this config must be inside."""
    return (base or Path.cwd()) / cfg.values["experiment"]["output_dir"]


def experiment_dir(cfg: Config, base: Path | None = None) -> Path:
    """runs/<experiment.name>/, the name made a slug (spaces and the like become '-'); a name that is
    not one folder name ('..', '/') was refused when the config was read (config.py), and is again
    here, with the folder checked to be inside the runs folder."""
    from envkit.fsutil import check_inside, check_name

    e = cfg.values["experiment"]
    where = _where(cfg, "experiment.name")
    check_name(e["name"], where, "experiment.name")
    name = re.sub(r"[^\w.-]+", "-", e["name"]).strip("-") or "experiment"
    check_name(name, where, "experiment.name")
    root = runs_root(cfg, base)
    return check_inside(root, root / name, where)


def check_run_id(run_id: str) -> str:
    """--run-id: one folder name of letters, digits, '.', '_' and '-', never '.' or '..'."""
    from envkit.fsutil import check_name

    check_name(run_id, "--run-id", "run id")
    if not re.fullmatch(r"[\w.-]+", run_id):
        raise EnvkitError(f"run id {run_id!r} may hold letters, digits, '.', '_' and '-' only", where="--run-id")
    return run_id


def run_dir_inside(cfg: Config, run_dir: Path, where: str) -> Path:
    """The chosen run folder, checked to be inside runs/<experiment>/ before anything is written."""
    from envkit.fsutil import check_inside

    return check_inside(experiment_dir(cfg), run_dir, where)


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def choose_run_dir(cfg: Config, run_id: str | None, resume: str) -> tuple[Path, bool, str | None]:
    """(run folder, resuming?, note)."""
    from envkit.fsutil import check_inside

    exp = experiment_dir(cfg)
    h = cfg.config_hash()
    if resume not in ("auto", "never"):
        ck = Path(resume).resolve()
        if not (ck.is_file() or (ck.is_dir() and ck.suffix == ".dcp")):
            raise EnvkitError("checkpoint not found", where=f"--resume {resume}",
                              fix="give a checkpoints/step_*.pt file or step_*.dcp folder, auto or never")
        return ck.parent.parent, True, f"resuming from {ck}"
    if run_id:
        d = check_inside(exp, exp / check_run_id(run_id), "--run-id")
        if d.exists() and (d / "config.json").exists():
            if resume == "never":
                raise EnvkitError(f"run folder {d} exists", where="--run-id", fix="choose another --run-id, or drop --resume never to continue it")
            s = read_json(d / "summary.json") or {}
            if s.get("status") in FINISHED:
                raise EnvkitError(f"run {run_id} already completed {s.get('steps')} steps", where=str(d),
                                  fix="choose another --run-id (or raise training.max_steps in a new run)")
            return d, True, None
        return d, False, None
    if resume == "auto" and exp.is_dir():
        candidates = sorted((p for p in exp.iterdir() if (p / "config.json").is_file()), key=lambda p: p.stat().st_mtime, reverse=True)
        for d in candidates:
            s = read_json(d / "summary.json") or {}
            if s.get("status") in FINISHED:
                continue
            saved = read_json(d / "config.json") or {}
            if saved.get("config_hash") == h:
                return d, True, f"resuming unfinished run {d.name} (same config; --resume never starts a new one)"
            return _new_run(exp), False, f"not resuming {d.name}: its config differs (hash {saved.get('config_hash')} != {h})"
    return _new_run(exp), False, None


def _new_run(exp: Path) -> Path:
    base = time.strftime("%Y%m%d-%H%M%S")
    d, i = exp / base, 1
    while d.exists():
        i += 1
        d = exp / f"{base}-{i}"
    return d


# ---------------------------------------------------------------- files


def clean_environ(env: dict) -> dict:
    """What environment.json records of the child's environment: the allow-list of envkit/redact.py."""
    from envkit.redact import recorded_env

    return recorded_env(env)


def git_commit(folder: Path) -> dict | None:
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip()), "folder": str(folder)}
    except (OSError, subprocess.SubprocessError):
        return None


class DiskFullAtStart(EnvkitError):
    """No space left while writing a run's files before training: nothing was changed (each file
    is written atomically, so config.json and the checkpoints are as they were). A fact about the
    machine, not bad input: exit code 1, as for a run that stopped on a full disk (disk_full)."""

    exit_code = 1


def write_run_files(p: Plan, run_dir: Path, child_env: dict) -> None:
    """config.json, config.yaml, environment.json; a full disk is one line (disk_full), nothing lost."""
    import errno

    try:
        _write_run_files(p, run_dir, child_env)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        what = Path(exc.filename).name if exc.filename else "the run's files"
        raise DiskFullAtStart(f"disk_full: no space left on the device while writing {what} in {run_dir} before training; "
                              "nothing was changed (config.json and the checkpoints are as they were)", where=str(run_dir),
                              fix="free some space, then run the same command again: it resumes") from None


def _inject_disk_full_at_start(path: Path) -> None:
    """ENVKIT_TRAIN_INJECT=diskfull@start: the first file written before training meets a full disk
    (train/recovery/faults.py's other faults fire inside the trainer; this one in envkit's process)."""
    from envkit.train.recovery.faults import ENV_INJECT, disk_full_error

    if "diskfull@start" in [x.strip() for x in os.environ.get(ENV_INJECT, "").split(",")]:
        raise disk_full_error(path)


def _write_run_files(p: Plan, run_dir: Path, child_env: dict) -> None:
    from envkit.checks.report import diagnose
    from envkit.redact import redact_argv

    run_dir.mkdir(parents=True, exist_ok=True)
    _inject_disk_full_at_start(run_dir / "config.json")
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    resolved = p.cfg.resolved()
    resolved["torch_settings"] = dict(getattr(p.profile, "torch", {}) or {}) if p.profile else None
    atomic_write_text(run_dir / "config.json", json.dumps(resolved, indent=2, default=str) + "\n")
    atomic_write_text(run_dir / "config.yaml", f"# resolved config (profile {p.cfg.profile or 'none'}); origins in config.json\n" + to_yaml(p.cfg))
    d = diagnose(p.facts).to_dict()
    src = Path(p.cfg.source).resolve().parent if p.cfg.source not in ("<defaults>",) else Path.cwd()
    env_doc = {
        "created_at": time.time(), "python": p.python, "argv": redact_argv(sys.argv),
        "managed": str(p.managed.root) if p.managed else None,
        "profile": p.cfg.profile, "profile_env": dict(getattr(p.profile, "env", {}) or {}) if p.profile else {},
        "user_env": p.profile.user_kept() if p.profile is not None and hasattr(p.profile, "user_kept") else {},
        "doctor": d, "packages": d["facts"].get("packages"),
        "environ": clean_environ(child_env), "git": git_commit(src),
    }
    from envkit.redact import redact

    # argv, the profile's variables and doctor's facts may hold URLs too: none keeps its credentials
    atomic_write_text(run_dir / "environment.json", json.dumps(redact(env_doc), indent=2, default=str) + "\n")


# ---------------------------------------------------------------- the child


@dataclass
class Nodes:
    """Several machines: passed through to torchrun's rendezvous (the engine PyTorch ships)."""

    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "static"  # global rank = node_rank * nproc + local rank: rank 0 is on node 0
    rdzv_id: str | None = None

    def torchrun_args(self) -> list[str]:
        if self.nnodes == 1:
            return ["--standalone"]
        return [f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}", f"--rdzv-backend={self.rdzv_backend}",
                f"--rdzv-endpoint={self.rdzv_endpoint}", f"--rdzv-id={self.rdzv_id or 'envkit'}"]


def torchrun_head(python: str, nodes: Nodes, nproc: int, rank_logs: Path | None = None) -> list[str]:
    """`python -m torch.distributed.run ...` up to the script. With rank_logs (a user's own script,
    where every rank may print) each worker's output goes through torchrun's tee: whole lines
    tagged `[default<rank>]:` on the console (two ranks printing at once no longer splice their
    lines) and a copy per rank under rank_logs. The trainer prints from rank 0 alone: no tags."""
    tee = ["--log-dir", str(rank_logs), "--tee", "3"] if rank_logs else []
    return [python, "-m", "torch.distributed.run", *nodes.torchrun_args(), f"--nproc-per-node={nproc}", *tee]


def parse_profile_steps(text: str | None) -> tuple[int, int] | None:
    """`--profile-steps A:B` -> (A, B): optimizer steps A to B inclusive, 1 <= A <= B."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise EnvkitError(f"{text!r} is not A:B with 1 <= A <= B", where="--profile-steps",
                          fix="e.g. --profile-steps 20:25 (after compilation and warm-up; a few steps make a readable trace)")
    return int(m.group(1)), int(m.group(2))


def child_command(python: str, run_dir: Path, *, stop_after: int | None, resume: str, nproc: int, debug: bool,
                  nodes: Nodes | None = None, profile_steps: tuple[int, int] | None = None) -> list[str]:
    args = [str(run_dir), "--resume", resume]
    if stop_after is not None:
        args += ["--stop-after", str(stop_after)]
    if profile_steps is not None:
        args += ["--profile-steps", f"{profile_steps[0]}:{profile_steps[1]}"]
    if debug:
        args.append("--debug")
    entry = str(child_entry())
    nodes = nodes or Nodes()
    if nproc > 1 or nodes.nnodes > 1:
        return [*torchrun_head(python, nodes, nproc), entry, *args]
    return [python, "-u", entry, *args]


def stage_for_node(p: Plan, run_dir: Path, node_rank: int) -> Path:
    """Node R > 0 writes nothing into the run folder (rank 0 of node 0 alone does): its processes
    read the resolved config from a private folder, whose checkpoints/ is the run folder's when
    that folder is visible here (a shared filesystem: resume works on every node)."""
    import tempfile

    stage = Path(tempfile.mkdtemp(prefix=f"envkit-node{node_rank}-"))
    resolved = p.cfg.resolved()
    resolved["torch_settings"] = dict(getattr(p.profile, "torch", {}) or {}) if p.profile else None
    atomic_write_text(stage / "config.json", json.dumps(resolved, indent=2, default=str) + "\n")
    if (run_dir / "checkpoints").is_dir():
        (stage / "checkpoints").symlink_to(run_dir / "checkpoints", target_is_directory=True)
    return stage


# The helpers the child may import (all pure Python) when the training interpreter lacks them.
_CHILD_HELPERS = ("rich", "pygments", "markdown_it", "mdurl", "yaml", "tomli", "packaging")

_BOOTSTRAP = """\
# Written by envkit: starts the trainer in whatever interpreter runs it.
import os, runpy, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[0] = os.getcwd()  # as `python -m` would: the user's own modules (model factories) first
sys.path.append(here)      # envkit and its helpers LAST: the environment's own packages (its torch) win
runpy.run_module("envkit.train.run.child", run_name="__main__", alter_sys=True)
"""


def child_entry() -> Path:
    """A folder holding only a bootstrap script and links to envkit and its pure-Python helpers.

    The child must import envkit.train whatever its Python (the managed venv does not hold
    envkit), but putting envkit's own site-packages on PYTHONPATH would put that interpreter's
    torch ahead of the managed venv's: the bootstrap appends this folder to the END of sys.path."""
    import hashlib
    import importlib.util
    import tempfile

    pkg = Path(__file__).resolve().parents[2]  # envkit/ (this file is envkit/train/run/launcher.py)
    key = hashlib.sha256(f"{pkg}|{_BOOTSTRAP}".encode()).hexdigest()[:12]
    base = Path(os.environ.get("ENVKIT_CACHE_DIR") or Path.home() / ".cache" / "envkit") / "child" / key
    entry = base / "envkit_child.py"
    if entry.is_file():
        return entry
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=base.parent))
    (tmp / "envkit").symlink_to(pkg, target_is_directory=True)
    for name in _CHILD_HELPERS:
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.submodule_search_locations:
            (tmp / name).symlink_to(Path(spec.origin).parent, target_is_directory=True)
        elif spec and spec.origin and spec.origin.endswith(".py"):
            (tmp / f"{name}.py").symlink_to(spec.origin)
    (tmp / "envkit_child.py").write_text(_BOOTSTRAP)
    try:
        os.replace(tmp, base)  # atomic: a concurrent run built the same folder, or this one wins
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return entry


def child_environ(profile, nproc: int = 1) -> dict:
    env = profile.child_environ(dict(os.environ)) if profile is not None and hasattr(profile, "child_environ") else dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if nproc > 1:
        env["OMP_NUM_THREADS"] = omp_threads_per_process(profile, env, nproc)
    return env


def omp_threads_per_process(profile, env: dict, nproc: int) -> str:
    """OpenMP threads for each of nproc torchrun processes. The profile's OMP_NUM_THREADS is meant
    for the whole machine (one per physical core), so each process gets its share; without one, the
    machine's cores are shared out. A value the user exported is kept as it is (per process, as
    torchrun reads it). Either way torchrun finds the variable set and does not print its banner."""
    from_profile = (getattr(profile, "env", None) or {}).get("OMP_NUM_THREADS")
    if os.environ.get("OMP_NUM_THREADS"):
        return os.environ["OMP_NUM_THREADS"]
    try:
        total = int(from_profile) if from_profile is not None else (os.cpu_count() or 1)
    except ValueError:
        total = os.cpu_count() or 1
    return str(max(1, total // nproc))


def launch(cmd: list[str], env: dict, owner=None, stdout=None) -> int:
    """Run the child; the parent ignores Ctrl-C meanwhile so the child can checkpoint cleanly. The
    child dies with envkit's process and holds the owner lock with it (spawn_child). `stdout`: where
    the child's lines go (`--json` sends them to stderr: stdout holds the JSON alone)."""
    proc = spawn_child(cmd, env, owner, **({"stdout": stdout} if stdout is not None else {}))
    # SIGTERM (envkit stop, a Slurm preemption) and SIGUSR1 (Slurm's warning before a time limit,
    # passed on by envkit's job script): the trainer checkpoints and stops; this process waits for it.
    forward = lambda signum, frame: ask_to_checkpoint(proc)  # noqa: E731
    old = {s: signal.signal(s, h) for s, h in ((signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, forward),
                                                (signal.SIGUSR1, forward))}
    try:
        return proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        release_child(proc)


def absolutise_paths(cfg: Config) -> None:
    """The child runs elsewhere: give it absolute dataset paths."""
    d = cfg.values["dataset"]
    if d.get("path"):
        d["path"] = str(resolve_path(cfg, d["path"]).resolve())
