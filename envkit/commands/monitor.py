"""`envkit runs`, `envkit monitor`, `envkit plot`: read run folders (no torch).

A run's state comes from its files: summary.json (finished), else heartbeat.json: "running" while
it is fresh and its pid lives, "stalled" when it is older than STALL_SECONDS, "dead" when the pid
is gone (on this host) without a summary."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from envkit.errors import EnvkitError

STALL_SECONDS = 60.0


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _pid_alive(pid) -> bool | None:
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return None
    return True


def run_state(run_dir: Path, now: float | None = None) -> dict:
    """{status, step, max_steps, loss, best_val_loss, eta_seconds, age_seconds, ...} of one run."""
    now = now or time.time()
    beat = _read(run_dir / "heartbeat.json") or {}
    summary = _read(run_dir / "summary.json")
    out = {"run": run_dir.name, "experiment": run_dir.parent.name, "path": str(run_dir),
           "step": beat.get("step"), "max_steps": beat.get("max_steps"), "loss": beat.get("loss"),
           "eta_seconds": beat.get("eta_seconds"), "best_val_loss": None}
    age = now - beat["updated_at"] if isinstance(beat.get("updated_at"), (int, float)) else None
    out["age_seconds"] = age
    if summary and (not beat or summary.get("updated_at", 0) >= beat.get("updated_at", 0) - 1):
        out.update(status=summary.get("status"), step=summary.get("steps"), max_steps=summary.get("max_steps"),
                   loss=summary.get("final_loss"), best_val_loss=summary.get("best_val_loss"), accuracy=summary.get("accuracy"),
                   tokens_per_second=summary.get("tokens_per_second"), samples_per_second=summary.get("samples_per_second"))
        return out
    if not beat:
        out["status"] = "new"
        return out
    same_host = beat.get("host") in (None, os.uname().nodename if hasattr(os, "uname") else None)
    alive = _pid_alive(beat.get("pid")) if same_host else None
    if alive is False:
        out["status"] = "dead"
    elif age is not None and age > STALL_SECONDS:
        out["status"] = "stalled"
    else:
        out["status"] = beat.get("status", "running")
    best = None
    for row in _metrics(run_dir):
        if "val_loss" in row and (best is None or row["val_loss"] < best):
            best = row["val_loss"]
    out["best_val_loss"] = best
    return out


def _metrics(run_dir: Path) -> list[dict]:
    rows = []
    try:
        with open(run_dir / "metrics.jsonl", encoding="utf-8") as fh:
            for line in fh:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue  # a line being written
    except OSError:
        pass
    return rows


def find_runs(root: Path) -> list[Path]:
    """Run folders (holding config.json) under root: root itself, root/<exp>/<run>, or root/runs/<exp>/<run>."""
    root = Path(root)
    if (root / "config.json").is_file():
        return [root]
    found = [p.parent for p in root.glob("*/*/config.json")] + [p.parent for p in root.glob("*/config.json")]
    if (root / "runs").is_dir() and not found:
        found = [p.parent for p in (root / "runs").glob("*/*/config.json")]
    return sorted(set(found), key=lambda p: p.stat().st_mtime, reverse=True)


def _fmt(x, spec=".4f"):
    return "-" if x is None else format(x, spec)


@click.command()
@click.argument("root", type=click.Path(file_okay=False), default="runs", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def runs(root, as_json):
    """A table of training runs under ROOT (default ./runs): status, steps, best val loss."""
    states = [run_state(d) for d in find_runs(Path(root))] if Path(root).exists() else []
    if as_json:
        click.echo(json.dumps(states, indent=2, default=str))
        return
    if not states:
        click.echo(f"no runs under {root} (start one with `envkit run train.yaml`)")
        return
    from envkit.console import console, is_tty

    header = ("experiment", "run", "status", "steps", "loss", "best val loss", "accuracy")
    rows = [(s["experiment"], s["run"], s["status"] or "?", f"{s['step'] if s['step'] is not None else '-'}/{s['max_steps'] or '-'}",
             _fmt(s.get("loss")), _fmt(s.get("best_val_loss")), _fmt(s.get("accuracy"), ".3f")) for s in states]
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


def resolve_run(run_dir: str | None) -> Path:
    if run_dir:
        p = Path(run_dir)
        if not (p / "config.json").is_file():
            found = find_runs(p) if p.is_dir() else []
            if not found:
                raise EnvkitError("not a run folder (no config.json)", where=str(p), fix="`envkit runs` lists the runs")
            return found[0]
        return p
    found = find_runs(Path("runs")) if Path("runs").is_dir() else []
    if not found:
        raise EnvkitError("no runs under ./runs", fix="give a RUN_DIR, or start one with `envkit run train.yaml`")
    return found[0]


def _line(s: dict) -> str:
    from envkit.train.telemetry import fmt_duration

    step = f"step {s['step'] if s['step'] is not None else '-'}/{s['max_steps'] or '-'}"
    parts = [f"{s['experiment']}/{s['run']}", s["status"] or "?", step, f"loss {_fmt(s.get('loss'))}",
             f"best val {_fmt(s.get('best_val_loss'))}"]
    if s["status"] in ("running",) and s.get("eta_seconds") is not None:
        parts.append(f"ETA {fmt_duration(s['eta_seconds'])}")
    if s.get("age_seconds") is not None and s["status"] in ("running", "stalled", "dead"):
        parts.append(f"heartbeat {fmt_duration(s['age_seconds'])} ago")
    return " | ".join(parts)


@click.command()
@click.argument("run_dir", type=click.Path(), required=False)
@click.option("--once", is_flag=True, help="Print the state once and exit (non-zero when stalled or dead).")
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds between refreshes.")
def monitor(run_dir, once, interval):
    """Live view of the newest (or given) run from its heartbeat and metrics; says "stalled" when
    the heartbeat is old and "dead" when its process is gone."""
    d = resolve_run(run_dir)
    from envkit.console import is_tty

    if once or not is_tty():
        while True:
            s = run_state(d)
            click.echo(_line(s))
            if once or s["status"] not in ("running", "new"):
                break
            time.sleep(interval)
        if s["status"] in ("stalled", "dead", "failed", "nan"):
            raise SystemExit(1)
        return
    from rich.live import Live
    from rich.text import Text

    with Live(refresh_per_second=4) as live:
        while True:
            s = run_state(d)
            rows = _metrics(d)
            recent = [r for r in rows if "loss" in r][-5:]
            text = Text(_line(s) + "\n", style={"running": "green", "stalled": "yellow", "dead": "red"}.get(s["status"] or "", ""))
            for r in recent:
                rate = r.get("tokens_per_second") or r.get("samples_per_second")
                text.append(f"  step {r['step']}: loss {r['loss']:.4f}  lr {r['lr']:.2e}  {rate or 0:,.0f}/s\n")
            live.update(text)
            if s["status"] not in ("running", "new"):
                break
            time.sleep(interval)


@click.command()
@click.argument("run_dir", type=click.Path(), required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="PNG path (default RUN_DIR/curves.png).")
def plot(run_dir, output):
    """Write loss and throughput curves of a run as a PNG (needs matplotlib: pip install 'envkit[plot]')."""
    d = resolve_run(run_dir)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EnvkitError("plotting needs matplotlib, which is not installed", where="envkit plot",
                          fix="pip install 'envkit[plot]' (or pip install matplotlib)")
    rows = _metrics(d)
    train = [r for r in rows if "loss" in r]
    val = [r for r in rows if "val_loss" in r]
    if not train:
        raise EnvkitError("no metrics yet", where=str(d / "metrics.jsonl"))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    if val:
        ax1.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="val")
    ax1.set_xlabel("step"), ax1.set_ylabel("loss"), ax1.legend(), ax1.set_title(f"{d.parent.name}/{d.name}")
    key = "tokens_per_second" if any("tokens_per_second" in r for r in train) else "samples_per_second"
    ax2.plot([r["step"] for r in train], [r.get(key) or 0 for r in train])
    ax2.set_xlabel("step"), ax2.set_ylabel(key.replace("_", " "))
    out = Path(output) if output else d / "curves.png"
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    click.echo(f"wrote {out}")
