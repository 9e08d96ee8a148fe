"""`envkit sweep --grid lr=1e-3,3e-3 --grid seed=1,2 -- python train.py --lr {lr} --seed {seed}`:
your own script over its arguments. Every combination is one `envkit exec` run, in its own run
folder runs/<name>/<combination>/ (`lr-1e-3_seed-1`), so `runs`, `monitor`, `plot` and `reproduce`
read it as any exec run; its metrics are the script's `envkit.track.log` calls or what it prints.

The command is checked before anything runs: every {key} it names is a grid key and every grid key
is used (a key the command never sees would train the same run twice). A completed combination is
skipped; one another process trains is skipped and named; an unfinished one's folder is kept
beside it (`<combination>.attempt-N`) and the combination trained again from the start."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

from envkit.console import print_json, print_table
from envkit.errors import EnvkitError
from envkit.exec.start_files import run_name
from envkit.runfolder.create import folder_name
from envkit.fsutil import check_inside, ignore_all
from envkit.plan.grid import MAX_RUNS
from envkit.runfolder.bounded import read_bytes
from envkit.runfolder.shown import shown
from envkit.runfolder.owner import owner_holder, owner_lock_state, read_owner
from envkit.sweep.report import grouped, pm
from envkit.train.watching.curves import draw_runs
from envkit.runfolder.progress import Summary
from envkit.runfolder.folder import RunFolder
from envkit.runfolder.records import RunStatus

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
GRID_FILE_MAX = 1 << 20


@dataclass(frozen=True)
class ScriptCombination:
    values: dict[str, str]  # key -> value as typed, in the grid's order

    @property
    def run_id(self) -> str:
        return "_".join(f"{k}-{_slug(v)}" for k, v in self.values.items()) or "base"

    @property
    def group(self) -> str:
        """The combination without its seed: runs of one group differ only by seed."""
        return ", ".join(f"{k}={v}" for k, v in self.values.items() if not k.lower().endswith("seed")) or "all"

    def argv(self, command: list[str]) -> list[str]:
        return [_PLACE.sub(lambda m: self.values[m.group(1)], a) for a in command]


def _slug(value: str) -> str:
    return re.sub(r"[^\w.-]+", "-", value).strip("-.") or "x"


def parse_grid(grids: tuple[str, ...], grid_file: str | None) -> dict[str, list[str]]:
    """--grid KEY=V1,V2 (repeatable) and --grid-file (YAML: {key: [values]}), in the order given."""
    out: dict[str, list[str]] = {}
    if grid_file:
        try:
            raw = read_bytes(Path(grid_file), max_bytes=GRID_FILE_MAX, required=True, what="grid file") or b""
            doc = yaml.safe_load(raw.decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise EnvkitError(f"not YAML: {str(exc).splitlines()[0]}", where=grid_file, fix="write {key: [value, ...]}") from None
        if not isinstance(doc, dict):
            raise EnvkitError("expected a mapping of keys to lists of values", where=grid_file, fix="e.g. lr: [0.001, 0.003]")
        for key, values in doc.items():
            if not isinstance(values, list) or not values or any(isinstance(v, (dict, list)) for v in values):
                raise EnvkitError(f"expected a non-empty list of plain values, got {values!r}", where=f"{grid_file}: {key}",
                                  fix="e.g. lr: [0.001, 0.003]")
            out[_key(str(key), f"{grid_file}: {key}")] = [_text(v) for v in values]
    for g in grids:
        key, eq, values = g.partition("=")
        if not eq or not values:
            raise EnvkitError(f"--grid {g!r} is not KEY=V1,V2,...", where="--grid", fix="e.g. --grid lr=1e-3,3e-3")
        out[_key(key, "--grid")] = [v for v in values.split(",") if v != ""]
    return out


def _key(key: str, where: str) -> str:
    if not _KEY.fullmatch(key):
        raise EnvkitError(f"grid key {key!r} is not a name (letters, digits, _)", where=where, fix="e.g. --grid lr=1e-3,3e-3")
    return key


def _text(v) -> str:
    return "true" if v is True else "false" if v is False else str(v)


def combinations(grid: dict[str, list[str]], command: list[str], max_runs: int = MAX_RUNS) -> list[ScriptCombination]:
    """Every combination, the first key varying slowest; the command's {keys} checked against the grid."""
    if not command:
        raise EnvkitError("no command to sweep", where="envkit sweep", fix="envkit sweep --grid lr=1e-3,3e-3 -- python train.py --lr {lr}")
    used = {m for a in command for m in _PLACE.findall(a)}
    unknown, unused = sorted(used - set(grid)), [k for k in grid if k not in used]
    if unknown:
        raise EnvkitError(f"the command names {{{unknown[0]}}}, which no --grid gives", where="envkit sweep",
                          fix=f"add --grid {unknown[0]}=V1,V2 or remove it from the command")
    if unused:
        raise EnvkitError(f"grid key {unused[0]} is not used by the command: every value would train the same run",
                          where="--grid", fix=f"put {{{unused[0]}}} into the command, e.g. --{unused[0]} {{{unused[0]}}}")
    total = 1
    for values in grid.values():
        total *= len(values)
    if total > max_runs:
        raise EnvkitError(f"the grid makes {total:,} runs, more than --max-runs {max_runs:,}", where="--grid",
                          fix="make the grid smaller or raise --max-runs")
    keys = list(grid)
    return [ScriptCombination(dict(zip(keys, vs))) for vs in itertools.product(*(grid[k] for k in keys))]


@dataclass
class ScriptRun:
    combo: ScriptCombination
    run_dir: Path
    status: str = "new"
    rc: int | None = None
    log: IO[bytes] | None = None  # envkit exec's own lines while it runs


def prepare(combos: list[ScriptCombination], runs_dir: Path, name: str) -> list[ScriptRun]:
    root = Path(runs_dir)
    sweep_dir = check_inside(root, root / name, "--name")
    return [ScriptRun(c, check_inside(sweep_dir, sweep_dir / c.run_id, "--grid")) for c in combos]


def state(run_dir: Path) -> str:
    summary = RunFolder(run_dir).summary() if run_dir.is_dir() else None
    return (summary.status if summary else None) or (RunStatus.NEW.value if not run_dir.exists() else "unfinished")


def train(runs: list[ScriptRun], command: list[str], *, parallel: int, exec_options: list[str], say) -> bool:
    """Each combination not completed, `parallel` at once; True when interrupted (Ctrl-C)."""
    todo = []
    for r in runs:
        r.status = state(r.run_dir)
        if r.status == "completed":
            say(f"skip    {r.combo.run_id}: completed")
        elif r.run_dir.is_dir() and owner_lock_state(r.run_dir) == "held":
            _, who = owner_holder(read_owner(r.run_dir))
            say(f"skip    {r.combo.run_id}: in use by {who}")
            r.status = "in use"
        else:
            todo.append(r)
    running: list[tuple[ScriptRun, subprocess.Popen]] = []
    try:
        while todo or running:
            while todo and len(running) < parallel:
                r = todo.pop(0)
                running.append((r, _start(r, command, exec_options, say)))
            time.sleep(0.2)
            for r, proc in list(running):
                if proc.poll() is not None:
                    running.remove((r, proc))
                    r.rc, r.status = proc.returncode, state(r.run_dir)
                    say(f"{'done' if r.status == 'completed' else 'ended':<7} {r.combo.run_id}: {r.status} (exit code {r.rc})")
                    for line in ([] if r.status == "completed" else _last_lines(r)):
                        say(f"        {shown(line)}")
    except KeyboardInterrupt:  # the exec supervisors got the same Ctrl-C: each stops its command and writes its summary
        for r, proc in running:
            proc.wait()
            r.rc, r.status = proc.returncode, state(r.run_dir)
        return True
    return False


def _start(r: ScriptRun, command: list[str], exec_options: list[str], say) -> subprocess.Popen:
    if r.run_dir.exists():  # an unfinished run: kept beside, the combination trained again from the start
        n = 1
        while (aside := r.run_dir.with_name(f"{r.run_dir.name}.attempt-{n}")).exists():
            n += 1
        r.run_dir.rename(aside)
        say(f"note: {r.combo.run_id} did not complete ({r.status}): kept as {aside.name}")
    root = r.run_dir.parent.parent
    new_root = not root.exists()
    r.run_dir.mkdir(parents=True)
    if new_root:
        ignore_all(root)  # made by this sweep: its outputs never go into the project's git
    argv = r.combo.argv(command)
    say(f"start   {r.combo.run_id}: {' '.join(argv)}")
    # its output is in its train.log; envkit's own lines are kept for a run that does not complete
    r.log = tempfile.TemporaryFile()
    return subprocess.Popen([sys.executable, "-m", "envkit", "exec", "--run-dir", str(r.run_dir), *exec_options, "--", *argv],
                            stdout=subprocess.DEVNULL, stderr=r.log, stdin=subprocess.DEVNULL)


def _last_lines(r: ScriptRun, n: int = 3) -> list[str]:
    if r.log is None:
        return []
    r.log.seek(0)
    lines = [ln for ln in r.log.read()[-65536:].decode("utf-8", "replace").splitlines() if ln.startswith("envkit")]
    r.log.close()
    r.log = None
    return lines[-n:]


def result(r: ScriptRun) -> dict:
    """One row: the run's last loss, best validation loss and steps, from its metrics (logged or printed)."""
    folder = RunFolder(r.run_dir)
    summary = (folder.summary() if r.run_dir.is_dir() else None) or Summary()
    try:
        rows = folder.metric_rows_tail() if r.run_dir.is_dir() else []
    except EnvkitError:
        rows = []
    losses = [x[k] for x in rows for k in ("loss", "train_loss") if isinstance(x.get(k), (int, float))]
    vals = [x["val_loss"] for x in rows if isinstance(x.get("val_loss"), (int, float))]
    steps = [x["step"] for x in rows if isinstance(x.get("step"), int)]
    return {"values": r.combo.values, "group": r.combo.group, "run_dir": str(r.run_dir), "status": summary.get("status") or r.status,
            "final_loss": losses[-1] if losses else None, "best_val_loss": min(vals) if vals else None,
            "steps": steps[-1] if steps else None, "exit_code": summary.get("exit_code", r.rc)}


def groups(results: list[dict]) -> list[dict]:
    """A command sweep's groups (the same values, seeds apart): final loss and best validation loss."""
    return grouped(results, ("final_loss", "best_val_loss"))


def table_rows(gs: list[dict]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    header = ("group", "runs", "final loss", "best val loss")
    return header, [(g["group"], f"{g['completed']}/{g['runs']}", pm(g["final_loss_mean"], g["final_loss_std"], ".4f"),
                     pm(g["best_val_loss_mean"], g["best_val_loss_std"], ".4f")) for g in gs]


def sweep_command(command: list[str], grids: tuple[str, ...], grid_file: str | None, *, name: str | None, runs_dir: str,
                  parallel: int, as_json: bool, plot: str | None, report_only: bool, max_runs: int, profile: str | None,
                  **unused) -> None:
    """The whole command sweep: checked, trained, reported; exit 0 all completed, 1 not, 130 interrupted."""
    pack = unused.get("pack")
    if pack is not None:  # --pack N is --parallel N; auto measures the trainer's step, which a command has not
        if not str(pack).isdigit() or int(pack) < 1:
            raise EnvkitError(f"--pack {pack} measures envkit's own trainer; a command sweep packs a number", where="--pack",
                              fix="--pack N (or --parallel N): that many runs at once")
        parallel = int(pack)
    given = [k for k in ("overrides", "stop_after", "python") if unused.get(k)]
    if given:
        raise EnvkitError(f"--{given[0].replace('_', '-')} is for train.yaml sweeps", where="envkit sweep --grid",
                          fix="put the value into the command (or a --grid) instead")
    combos = combinations(parse_grid(grids, grid_file), command, max_runs)
    runs = prepare(combos, Path(runs_dir), folder_name(name or run_name(command), "--name", "run name"))
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if as_json else (lambda m: print(m, flush=True))
    exec_options = ["--profile", profile] if profile else []
    interrupted = False if report_only else train(runs, command, parallel=parallel, exec_options=exec_options, say=say)
    results = [result(r) for r in runs]
    gs = groups(results)
    if plot:
        say(f"wrote {draw_runs([(Path(r['run_dir']), r['group']) for r in results], Path(plot), title=' '.join(command)[:80])}")
    if as_json:
        print_json({"runs": results, "groups": gs})
    else:
        print_table("sweep: mean ± std across seeds (completed runs)", *table_rows(gs))
        for r in results:
            if r["status"] != "completed":
                print(f"not completed: {Path(r['run_dir']).name} ({r['status']})")
    left = [r for r in results if r["status"] != "completed"]
    if interrupted:
        say(f"sweep interrupted: {len(left)} of {len(results)} runs left; `envkit sweep` again trains them")
        raise SystemExit(130)
    if left and not report_only:
        raise SystemExit(1)
