"""`envkit runs`: a table of the training runs under a folder."""

from __future__ import annotations

from pathlib import Path

import click

from envkit.console import print_json, console, is_tty
from envkit.runfolder.find import find_runs


def _fmt(x, spec=".4f"):
    return "-" if x is None else format(x, spec)


@click.command()
@click.argument("root", type=click.Path(file_okay=False), default="runs", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def runs(root, as_json):
    """A table of training runs under ROOT (default ./runs): status, steps, best val loss."""
    dirs = find_runs(Path(root)) if Path(root).exists() else []
    states: list[dict] = []
    if dirs:
        from envkit.train.watching.folder_status import run_state  # judging a run: not on `runs --help`, nor where none is found (LAZY_OK)

        states = [run_state(d) for d in dirs]
    if as_json:
        print_json(states)
        return
    if not states:
        click.echo(f"no runs under {root} (start one with `envkit run train.yaml`)")
        return

    header = ("experiment", "run", "status", "steps (epochs)" if any(s.get("epochs") for s in states) else "steps",
              "loss", "best val loss", "accuracy", "avg util")
    rows = [(s["experiment"], s["run"], s["status"] or "?", _progress(s),
             _fmt(s.get("loss")), _fmt(s.get("best_val_loss")), _fmt(s.get("accuracy"), ".3f"),
             "-" if s.get("avg_device_util_pct") is None else f"{s['avg_device_util_pct']:.0f}%") for s in states]
    keys = _setting_keys(states)
    if keys:  # a script's own settings (envkit.track.config), a column each
        header = (*header, *keys)
        rows = [(*r, *(_setting((s.get("settings") or {}).get(k)) for k in keys)) for r, s in zip(rows, states)]
    if any(s.get("slurm") for s in states):  # the job id and Slurm's word on it, beside envkit's
        header = (*header, "slurm job")
        rows = [(*r, _job(s.get("slurm"))) for r, s in zip(rows, states)]
    if any(s.get("reproduced") for s in states):  # `envkit reproduce`: same / within tolerance / different
        header = (*header, "reproduced")
        rows = [(*r, (s.get("reproduced") or {}).get("outcome") or "-") for r, s in zip(rows, states)]
    if is_tty():
        from rich.table import Table

        t = Table(*header)
        for r in rows:
            t.add_row(*r)
        console().print(t)
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for r in (header, *rows):
            click.echo("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip())


SETTING_COLUMNS = 6


def _setting_keys(states: list[dict]) -> list[str]:
    """The settings shown as columns: those whose value differs between the runs listed first (what
    tells them apart), then the rest, SETTING_COLUMNS at most."""
    seen: dict[str, set] = {}
    for s in states:
        for k, v in (s.get("settings") or {}).items():
            seen.setdefault(k, set()).add(repr(v))
    varying = [k for k in seen if len(seen[k]) > 1 or len(states) == 1]
    return (varying + [k for k in seen if k not in varying])[:SETTING_COLUMNS]


def _setting(value) -> str:
    if value is None:
        return "-"
    return format(value, ".4g") if isinstance(value, float) else str(value)[:24]


def _job(slurm: dict | None) -> str:
    if not slurm:
        return "-"
    return f"{slurm['job_id']} {(slurm.get('state') or '?').lower()}" + (f" (requeued {slurm['restarts']}x)" if slurm.get("restarts") else "")


def _progress(s: dict) -> str:
    """`12/390`, or with training.epochs `12/390 (ep 0.03/1)`: the epoch reached, from the step."""
    steps = f"{s['step'] if s['step'] is not None else '-'}/{s['max_steps'] or '-'}"
    if s.get("epochs") and s.get("max_steps") and s.get("step") is not None:
        return f"{steps} (ep {s['epochs'] * s['step'] / s['max_steps']:.2f}/{s['epochs']})"
    return steps
