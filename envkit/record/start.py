"""`write_run_record`: the one call that gives a run folder what `envkit reproduce` needs, made
when the run starts (`envkit run`, each sweep combination, Slurm's nodes through those, `envkit
exec`). A resumed run keeps the record of its start.

The code state is taken before the run's code starts (an edit made after that is not the run's);
the environment's lock, the slow part, is made by a thread while the trainer starts. Never a
reason for a run not to start: each part that fails (no git, an unreadable data path, an
interpreter that cannot be examined) is recorded as an error line while the rest goes on."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
import time
from pathlib import Path

from envkit import __version__
from envkit.fsutil import atomic_write_text, process_start_time
from envkit.install.lock.machine import machine_device, platform_of
from envkit.record import code, data, envlock
from envkit.runfolder import record_files as files
from envkit.record.code import tracked
from envkit.redact import redact, redact_argv
from envkit.runfolder.bounded import RunFolderError
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.records import RunRecord
from envkit.runfolder.seal import seal

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _guard(errors: list[str], what: str, fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except OSError as exc:
        if exc.errno in _DISK_FULL:
            raise
        errors.append(f"{what}: {exc.strerror or exc}")
    except Exception as exc:  # noqa: BLE001 - a record that cannot be completed says so; the run goes on
        errors.append(f"{what}: {getattr(exc, 'message', None) or exc}")
    return None


def config_record(cfg) -> dict:
    """The declared config, the overrides (--set), what the run derived at its start, and the one
    config hash (config.json, summary.json and every checkpoint carry the same). What the trainer
    derives later (max_steps from epochs, the resolved precision and compile) is summary.json's
    `derived`."""
    declared = cfg.to_dict()
    overrides = {k: v for k, v, o in cfg.rows() if o == "cli"}
    derived = dict(cfg.derived)
    whole = hashlib.sha256(json.dumps({"declared": declared, "derived": derived}, sort_keys=True, default=str).encode())
    return {"declared": declared, "overrides": overrides, "derived_at_start": derived, "origin": cfg.origin_texts(),
            "profile": cfg.profile, "source": cfg.source, "config_hash": cfg.config_hash(),
            "values_hash": whole.hexdigest()[:16]}


def data_paths(cfg) -> list[tuple[str, str]]:
    """(config key, path) of every data path the config names: dataset.path and path-like strings
    in dataset.kwargs (a factory's files)."""
    out = []
    if cfg.dataset.path:
        out.append(("dataset.path", str(cfg.dataset.path)))
    for k, v in (cfg.dataset.kwargs or {}).items():
        if isinstance(v, str) and ("/" in v or os.sep in v) and Path(v).exists():
            out.append((f"dataset.kwargs.{k}", str(Path(v).resolve())))
    return out


def command_paths(command: list[str], top: Path | None) -> list[tuple[str, str]]:
    """Arguments of an exec command that name an existing file or folder outside git's tracked
    files (`--data /x/train.bin`, `--data=/x`): its data, as far as envkit can tell."""
    candidates = []
    for i, arg in enumerate(command[1:], 1):
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if value.startswith("-") or not value or len(value) > 4096:
            continue
        p = Path(value)
        if p.exists() and not p.is_symlink() and str(p.resolve()) != "/":
            candidates.append((f"argv[{i}]", p.resolve()))
    code = tracked(top, [p for _, p in candidates if p.is_file()]) if top else set()
    script = Path(command[1]).resolve() if len(command) > 1 and command[1].endswith(".py") else None
    return [(k, str(p)) for k, p in candidates if p not in code and p != script and not (p.is_file() and p.suffix == ".py")]


def write_run_record(run_dir: Path, *, python: str | None, config=None, command: list[str] | None = None,
                     project: Path | None = None, facts=None, detached: bool = False,
                     profile: str | None = None, processes: dict | None = None) -> threading.Thread | None:
    """pylock.toml, code/ and record.json in run_dir (config: a train Config, for `envkit run`;
    command: the argv of `envkit exec`). Called before the run's code starts, and its code state is
    taken here and now, before it returns (the commit, the patch, the untracked files, the
    submodules, the data's fingerprints: tens of milliseconds), so an edit made once the run has
    started is never recorded as the run's code. The environment's lock (seconds for an
    environment's first, cached by its state after that) is made by the thread returned, while the
    trainer or the command starts; record.json is written when it ends, files.PENDING marks the run
    folder until then. The thread is not a daemon: the caller waits for it before it returns
    (`envkit exec` joins it; `envkit run`'s process ends only once it is done). None for a resumed
    run (its record is its start's). `detached` is kept for callers; the record is the same.
    `processes`: {"world": all processes, "nodes": machines} of an `envkit run` run: its arithmetic
    (how a batch is split and its gradients summed), which a reproduction trains with again."""
    run_dir = Path(run_dir)
    if (run_dir / files.RECORD).is_file():
        return None
    project = Path(project or os.getcwd()).resolve()
    try:
        atomic_write_text(run_dir / files.PENDING, json.dumps({"pid": os.getpid(), "start_time": process_start_time(os.getpid())}))
        rec, errors = capture(run_dir, config=config, command=command, project=project, cwd=os.getcwd(), profile=profile)
        if processes is not None:
            rec["processes"] = dict(processes)
    except OSError:  # a full disk: the run's own files say so (train.log, summary.json); no record is written
        (run_dir / files.PENDING).unlink(missing_ok=True)
        return None
    t = threading.Thread(target=_finish_quietly, name="envkit-record", args=(run_dir, rec, errors),
                         kwargs={"python": python, "profile": getattr(config, "profile", None), "facts": facts})
    t.start()
    return t


def _finish_quietly(run_dir: Path, rec: dict, errors: list[str], **kw) -> None:
    try:
        finish(run_dir, rec, errors, **kw)
    except OSError:
        pass  # a full disk: the run's own files say so (train.log, summary.json); no record is written
    finally:
        (run_dir / files.PENDING).unlink(missing_ok=True)


def capture(run_dir: Path, *, config=None, command: list[str] | None = None, project: Path | None = None,
            cwd: str | None = None, profile: str | None = None) -> tuple[dict, list[str]]:
    """(the record without the environment, the errors so far): what must be taken before the run's
    code starts. The code states' patches and untracked files are written into code/ now."""
    run_dir = Path(run_dir)
    errors: list[str] = []
    rec: dict = {"format": files.FORMAT, "kind": "run" if config is not None else "exec", "created_at": time.time(),
                 "envkit": __version__, "python": None, "cwd": cwd or os.getcwd(), "_t0": time.perf_counter()}
    out_dir = run_dir / files.CODE_DIR
    runs_root = run_dir.parent.parent
    project = Path(project or os.getcwd())
    inside = code.run_folder_above(project)
    if inside is not None:  # started from inside a run folder (its config.yaml): the tree holding that run folder
        project = inside.parent
    own = code.envkit_folders(project, runs_root)
    rec["code"] = [s for s in (
        _guard(errors, "code state", code.code_state, project, role="project", out_dir=out_dir, exclude=own),
        _guard(errors, "envkit's code state", code.code_state, Path(__file__).resolve().parents[1], role="envkit",
               out_dir=out_dir, pathspec=["envkit"], exclude=own),
    ) if s]
    if config is not None:
        rec["config"] = config_record(config)
        rec["determinism"] = {"deterministic": bool(getattr(config.training, "deterministic", False))}
        paths = data_paths(config)
    else:
        rec["command"] = redact_argv(command or [])
        rec["profile"] = profile  # the exec run's profile: what reproduce runs comes from the sealed record
        top = _guard(errors, "code state", code.toplevel, project)
        paths = _guard(errors, "data paths", command_paths, command or [], top) or []
    rec["data"] = [_guard(errors, f"data {p}", data.fingerprint, p, key) or {"key": key, "path": p, "kind": "unreadable"}
                   for key, p in paths]
    return rec, errors


def finish(run_dir: Path, rec: dict, errors: list[str], *, python: str | None, profile: str | None = None, facts=None) -> dict:
    """The environment's lock (pylock.toml), the local distributions' code states, record.json."""
    run_dir = Path(run_dir)
    t0 = rec.pop("_t0", time.perf_counter())
    rec["python"] = python
    device = _guard(errors, "device", _device, facts) if facts is not None else None
    lock = _guard(errors, "environment lock", envlock.environment_lock, python, device=device, profile=profile) if python else None
    if lock is not None:
        envlock.write(run_dir, lock)
        rec["environment"] = lock.summary()
    out_dir, runs_root = run_dir / files.CODE_DIR, run_dir.parent.parent
    for local in (lock.local if lock is not None else []):
        folder = Path(local["folder"]) if local.get("folder") else None
        if folder and folder.is_dir() and not any(Path(s["folder"]) == code.toplevel(folder) for s in rec["code"]):
            state = _guard(errors, f"code state of {local['name']}", code.code_state, folder, role=f"local-{local['name']}",
                           out_dir=out_dir, exclude=[runs_root])
            rec["code"].append(state or {"role": f"local-{local['name']}", "folder": str(folder), "commit": None})
    rec["errors"] = errors
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    # written through the type its readers take (reproduce, `runs`): a record that would not read back
    # is written as it is with the reason among its errors (reproduce then refuses it in one line)
    doc = json.loads(json.dumps(redact(rec), default=str))
    try:
        record = RunRecord.from_json(doc, str(run_dir / files.RECORD))
    except RunFolderError as exc:
        doc["errors"] = [*doc.get("errors", []), f"the record does not read back: {exc}"]
        record = RunRecord.unchecked(doc)
    RunFolder(run_dir).write_record(record)

    seal(run_dir)  # the record complete: signed under this machine's key (runfolder/seal.py)
    return rec


def record_now(run_dir: Path, *, python: str | None, config=None, command: list[str] | None = None,
               project: Path | None = None, facts=None, cwd: str | None = None) -> dict:
    """The whole record, written now, in this thread."""
    rec, errors = capture(run_dir, config=config, command=command, project=project, cwd=cwd)
    return finish(run_dir, rec, errors, python=python, profile=getattr(config, "profile", None), facts=facts)


def _device(facts) -> str:
    """The accelerator as setup's locks name it (platform_of: ROCm is "rocm", not torch's "cuda"), so
    the run's lock compares equal to this machine's (reproduce, setup --lock)."""
    return platform_of(facts, device=machine_device(facts)).get("device") or machine_device(facts)
