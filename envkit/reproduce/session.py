"""`envkit reproduce RUN_DIR` as one function: the record read and its data checked (changed data:
exit 2), a venv from the run's lock (venv.py; a run from another kind of machine: from the lock
elsewhere.py makes for this one), the code put back (restore.py) and the run's local distributions
installed from it (local.py), the run trained again beside the original (rerun.py), the metrics
compared step by step (metrics.py) and judged (verdict.py), the outcome written into the original
run folder (reproductions.json), where `envkit runs` shows it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.facts import gather
from envkit.runfolder import record_files as files
from envkit.reproduce import local, metrics, venv as venvs, verdict
from envkit.reproduce.check import CannotReproduce, data_lines, open_run
from envkit.reproduce.consent import ask
from envkit.reproduce.rerun import next_dir, rerun
from envkit.reproduce.elsewhere import adapt
from envkit.reproduce.plan import Plan, make
from envkit.reproduce.restore import restore
from envkit.runfolder import names
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.owner import owner_lock_state, read_owner
from envkit.runfolder.bounded import RunFolderError
from envkit.runfolder.records import RunRecord, RunStatus
from envkit.runfolder.shown import shown_list
from envkit.runfolder.snapshot import RunSnapshot

if TYPE_CHECKING:
    from envkit.config.schema import DeviceType

EXIT = {"same": 0, "within tolerance": 0, "different": 1}


def _facts_of_new(run: Path) -> dict:
    """The facts of a reproduction's own folder (this process made it)."""
    folder = RunFolder(run)
    doc = files.read_record(run)
    try:
        record = RunRecord.from_json(doc, str(folder.record_file)) if doc else None
    except RunFolderError:  # this process wrote it: a record it cannot read again only costs the determinism fact
        record = None
    return verdict.facts_of(folder.summary(), record, folder.environment())


def _facts_of_original(folder: RunSnapshot) -> dict:
    """The original's facts, from its snapshot."""
    return verdict.facts_of(folder.summary, folder.record, folder.environment_doc)


def _train(plan: Plan, steps: int | None, say, where: dict | None = None) -> Path:
    new_dir = next_dir(plan.folder.path)
    rc = rerun(plan, new_dir, steps, say, **(where or {}))
    if not RunFolder(new_dir).metrics_file.is_file():
        raise CannotReproduce(f"the reproduction wrote no metrics (exit code {rc}; its log: {RunFolder(new_dir).train_log})",
                              where=str(new_dir), fix="read its train.log; `envkit reproduce --check` names what differs")
    return new_dir


def steps_apply(plan: Plan, steps: int | None, say) -> None:
    """--steps of an exec run works through envkit.track (ENVKIT_STOP_AFTER_STEP): one line where
    the run's script logged no steps, so nothing can stop it at one."""
    if steps is None or plan.kind != "exec" or plan.steps_compared:
        return
    say(f"note: --steps {steps} cannot apply: the run's script logged no steps through envkit.track "
        "(its metrics.jsonl has none), so its command runs whole")


def stopped_at(new_dir: Path, rec: dict, steps: int | None, say) -> None:
    """An exec reproduction that went on past step N: its envkit.track did not stop it (a script
    that imports another envkit's, older than --steps); what lies beyond N is not compared."""
    if steps is None or rec.get("kind") != "exec":
        return
    beyond = [s for s in metrics.read_rows(new_dir) if s > steps]
    if beyond:
        say(f"note: the reproduction went on past step {steps} to step {max(beyond)} (the envkit.track its script "
            f"imports did not stop it); steps after {steps} are not compared")


def record_outcome(run_dir: Path, entry: dict) -> None:
    files.add_reproduction(run_dir, entry)


def _spread(plan: Plan, new_dir, b: dict, cmp: dict, steps, why: str, say,
            where: dict | None = None) -> tuple[dict | None, str | None, Path | None]:
    """(this device's run-to-run spread, where it came from, the second reproduction trained for it)."""
    if b.get("device") == "cpu":
        return {}, "0 on the CPU, where envkit's runs are bit-identical", None
    key = verdict.spread_key(b, plan.record, cmp["steps"])
    spread = verdict.cached_spread(key)
    if spread is not None:
        return spread, "cached", None
    say("not held to identical (" + why + "): training a second reproduction to measure this device's run-to-run spread")
    spread_dir = _train(plan, steps, say, where)
    spread = metrics.compare(metrics.read_rows(new_dir), metrics.read_rows(spread_dir), steps)["metrics"]
    verdict.keep_spread(key, spread)
    return spread, f"measured: {new_dir.name} against {spread_dir.name}", spread_dir


def _judge(plan: Plan, new_dir: Path, steps: int | None, tolerance: float | None,
           elsewhere, say, where: dict | None = None) -> dict:
    """The comparison and its verdict, with what it was held to and why (the original's side read
    from the snapshot alone)."""
    a, b = _facts_of_original(plan.folder), _facts_of_new(new_dir)
    required, why = verdict.identical_required(a, b)
    other_device = verdict.other_device_kind(a, b)
    if elsewhere is not None:
        required, why = False, f"recorded on another machine ({'; '.join(elsewhere.differences)}): other kernels"
    elif other_device is not None:
        required, why = False, f"trained on another kind of device ({other_device}): other kernels"
    original = metrics.rows_of(plan.folder.files.get(names.METRICS, b""))
    cmp = metrics.compare(original, metrics.read_rows(new_dir), steps)
    spread, spread_from, spread_dir = None, None, None
    identical = all(m["identical"] for m in cmp["metrics"].values())
    if not required and tolerance is None and not identical:
        spread, spread_from, spread_dir = _spread(plan, new_dir, b, cmp, steps, why, say, where)
    bounds = None
    if (elsewhere is not None or other_device is not None) and tolerance is None:
        bounds = verdict.across_machines(cmp, original, spread)
        spread_from = (f"the larger of {verdict.SPREAD_FACTOR:g} x this machine's run-to-run spread ("
                       + (spread_from or "not measured: the runs came out identical") + f") and {verdict.REL_ACROSS:g} x each "
                       "metric's largest |value| in the original, as for any run from another machine or device")
    outcome, tol = verdict.decide(cmp, required, tolerance, spread, bounds)
    if cmp["missing_steps"] and steps is None:
        outcome, why = "different", f"the reproduction logged no step {cmp['missing_steps'][0]} (it stopped early)"
    printed = _printed_precision(plan.folder)
    if printed:
        why += ("; compared as the script printed them (" + ", ".join(f"{k} to {v} decimals" for k, v in sorted(printed.items()))
                + "): a difference below that is not seen")
    return {"outcome": outcome, "identical_required": required, "why": why, "steps_compared": cmp["steps"], "printed": printed,
            "missing_steps": cmp["missing_steps"][:20], "metrics": cmp["metrics"], "tolerance": tol,
            "tolerance_from": "--tolerance" if tolerance is not None else spread_from,
            "spread_run": spread_dir.name if spread_dir else None, "facts": {"original": a, "reproduction": b}}


def _printed_precision(folder: RunSnapshot) -> dict[str, int]:
    """metric -> the fewest decimals the script printed it with, for metrics read from its output (exec/scalars.py)."""
    out: dict[str, int] = {}
    for row in folder.metric_rows:
        if row.get("source") == "printed" and isinstance(row.get("printed"), dict):
            for k, v in row["printed"].items():
                if isinstance(v, int) and not isinstance(v, bool):
                    out[str(k)] = min(v, out.get(str(k), v))
    return out


def _another_machine(plan: Plan, facts, say):
    """A run recorded on another kind of machine: the lock made for this one (elsewhere.py), said in one line."""
    elsewhere = adapt(plan.lock, facts)
    if elsewhere is not None:
        say(elsewhere.line())
    return elsewhere


def refuse_running(folder) -> None:
    """A run still training: its metrics are not final, so it is not compared against (exit 2, its PID)."""
    if owner_lock_state(folder.path) == "held":
        owner = read_owner(folder.path)
        raise CannotReproduce(f"the run is still going (PID {owner.get('pid', '?')}, {owner.get('command', 'envkit')}): "
                              "its metrics are not final", where=str(folder.path),
                              fix="wait for it to end (`envkit monitor` shows it), or stop it with `envkit stop`, then reproduce")


def refuse_unreproducible(folder, rec, say) -> None:
    """What cannot work, said before anything is built or trained: a run that logged no metrics has
    nothing to compare against."""
    if not metrics.rows_of(folder.files.get(names.METRICS, b"")):
        ended = "" if folder.status is RunStatus.UNKNOWN else f"; it ended {folder.status.value}"
        raise CannotReproduce(f"the run logged no metrics (its metrics.jsonl has no step{ended}), so a reproduction would "
                              "have nothing to compare against", where=str(folder.file(names.METRICS)),
                              fix="print them as most scripts do (`step 10: loss 2.31`, or give `envkit exec --metrics-pattern "
                                  "REGEX`), or log them with `from envkit import track; track.log(step, loss=...)`; run it again, "
                                  "then reproduce that run" if rec.kind == "exec"
                              else "the run stopped before its first logged step; run it again")


def reproduce(run_dir: Path, *, venv: Path | None = None, steps: int | None = None, tolerance: float | None = None, device: DeviceType | None = None,
              say=print, yes: bool = False, interactive: bool | None = None) -> dict:
    """The run folder read once (its snapshot), one plan made from it and shown where it is asked
    about, then only that plan carried out."""
    folder = open_run(run_dir)
    try:
        refuse_running(folder)
        refuse_unreproducible(folder, folder.record, say)
        record = folder.record
        assert record is not None  # open_run refused a folder without one
        changed = data_lines(folder.data)
        if changed:
            raise CannotReproduce(f"the run's data changed: {changed[0]}" + (f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""),
                                  where=str(folder.path), fix="put the data back as it was; `envkit reproduce --check` lists every change")
        facts = gather(None, runtime=False, gpu_detail=False)
        the_plan = make(folder, venv=venv, steps=steps, device=device, facts=facts)
        try:
            consent = ask(the_plan, yes=yes, say=say, interactive=interactive)
            return _carry_out(the_plan, consent, facts, steps=steps, tolerance=tolerance, device=device, say=say)
        finally:
            the_plan.close()
    finally:
        folder.close()


def _carry_out(plan: Plan, consent: str, facts, *, steps, tolerance, device, say) -> dict:
    """The plan as shown: nothing is read from the run folder here (it only receives reproductions.json)."""
    record, run_dir = plan.record, plan.folder.path
    rec = record.to_json()
    missing = list(record.missing_hashes)
    if missing:
        say(f"note: {len(missing)} packages were recorded without a wheel hash (the index was unreachable or needed "
            f"credentials when the run started): {shown_list(missing)}; the venv holds them at the recorded versions")
    elsewhere = _another_machine(plan, facts, say)
    venv_dir, built = venvs.prepare(elsewhere.lock if elsewhere else plan.lock_path, rec, plan.venv, plan.venv_given,
                                    plan.profile, say, facts)
    restored = restore(plan, say=say)
    steps_apply(plan, steps, say)
    local_installed: list[str] = []
    try:
        # Only a venv reproduce owns (built now, or its own in envkit's cache) gets the run's local
        # distributions and loses them again at the end; a venv of yours given with --venv keeps its own.
        if venvs.owned(venv_dir):
            local_installed = local.install(rec, venvs.python_of(venv_dir), restored, say)
        else:
            local.say_kept(rec, venv_dir, say)
        where = {"device": device, "elsewhere": elsewhere is not None}
        new_dir = _train(plan, steps, say, where)
        stopped_at(new_dir, rec, steps, say)
        judged = _judge(plan, new_dir, steps, tolerance, elsewhere, say, where)
    finally:
        local.remove(venvs.python_of(venv_dir), local_installed)
        restored.close()
    entry = {"at": time.time(), "run": new_dir.name, "path": str(new_dir), **judged, "consent": consent, "venv": str(venv_dir), "venv_built": built,
             "code": {k: str(v) for k, v in restored.folders.items()}, "local": local_installed,
             "another_machine": None if elsewhere is None else {**elsewhere.to_dict(), "line": elsewhere.line(judged)}}
    record_outcome(run_dir, entry)
    return {"run_dir": str(run_dir), "exit_code": EXIT[judged["outcome"]], **entry}
