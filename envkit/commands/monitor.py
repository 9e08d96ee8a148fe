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
# The device fields of a metrics row that monitor shows and --json reports under "latest".
DEVICE_KEYS = ("device_util_pct", "renderer_util_pct", "device_mem_used_mb", "device_mem_total_mb", "torch_allocated_mb",
               "torch_reserved_mb", "torch_peak_mb", "torch_driver_mb", "power_w", "temp_c", "system_mem_free_pct", "cpu_pct",
               "rss_mb", "dataloader_workers", "data_wait_fraction")


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
    rows = _metrics(run_dir)
    _device_state(out, run_dir, rows, beat, summary)
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
    for row in rows:
        if "val_loss" in row and (best is None or row["val_loss"] < best):
            best = row["val_loss"]
    out["best_val_loss"] = best
    return out


def _device_state(out: dict, run_dir: Path, rows: list[dict], beat: dict, summary: dict | None) -> None:
    """latest: the newest training row's throughput and device fields; avg_device_util_pct; hints
    (the trainer's, from summary.json, else judged from metrics.jsonl by the same pure function)."""
    from envkit.train.diagnose import HintContext, diagnose

    train = [r for r in rows if "loss" in r]
    latest = {k: train[-1][k] for k in ("step", "dt_ms", "tokens_per_second", "samples_per_second", *DEVICE_KEYS)
              if train and k in train[-1]}
    out["latest"] = latest
    utils = [r["device_util_pct"] for r in train if isinstance(r.get("device_util_pct"), (int, float))]
    out["avg_device_util_pct"] = (summary or {}).get("avg_device_util_pct") or (round(sum(utils) / len(utils), 1) if utils else None)
    if summary and "hints" in summary:
        out["hints"] = summary["hints"]
        return
    config = (_read(run_dir / "config.json") or {}).get("values", {})
    device = (summary or {}).get("device") or (beat.get("device") or {}).get("device") or "cpu"
    out["hints"] = [h.to_dict() for h in diagnose(rows, HintContext.from_config(config, device))]


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

    header = ("experiment", "run", "status", "steps", "loss", "best val loss", "accuracy", "avg util")
    rows = [(s["experiment"], s["run"], s["status"] or "?", f"{s['step'] if s['step'] is not None else '-'}/{s['max_steps'] or '-'}",
             _fmt(s.get("loss")), _fmt(s.get("best_val_loss")), _fmt(s.get("accuracy"), ".3f"),
             "-" if s.get("avg_device_util_pct") is None else f"{s['avg_device_util_pct']:.0f}%") for s in states]
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
    device = _device_line(s.get("latest") or {})
    return " | ".join(parts) + (f" | {device}" if device else "")


def _device_line(r: dict) -> str:
    """"12.3k tok/s | util 97% | mem 71.2/79.6 GiB | torch 60.1 GiB | power 612W | 66C | cpu 101% | rss 3.1 GiB | data wait 2%"."""
    from envkit.train.telemetry import fmt_rate

    parts = []
    rate = r.get("tokens_per_second") or r.get("samples_per_second")
    if rate:
        parts.append(f"{fmt_rate(rate)} {'tok/s' if r.get('tokens_per_second') else 'samples/s'}")
    if r.get("device_util_pct") is not None:
        parts.append(f"util {r['device_util_pct']:.0f}%")
    if r.get("device_mem_used_mb") is not None:
        total = f"/{r['device_mem_total_mb'] / 1024:.1f}" if r.get("device_mem_total_mb") else ""
        parts.append(f"mem {r['device_mem_used_mb'] / 1024:.1f}{total} GiB")
    if r.get("torch_allocated_mb") is not None:
        parts.append(f"torch {r['torch_allocated_mb'] / 1024:.2f} GiB")
    if r.get("power_w") is not None:
        parts.append(f"power {r['power_w']:.0f}W")
    if r.get("temp_c") is not None:
        parts.append(f"{r['temp_c']:.0f}C")
    if r.get("system_mem_free_pct") is not None:
        parts.append(f"system memory {r['system_mem_free_pct']:.0f}% free")
    if r.get("cpu_pct") is not None:
        parts.append(f"cpu {r['cpu_pct']:.0f}%")
    if r.get("rss_mb") is not None:
        parts.append(f"rss {r['rss_mb'] / 1024:.2f} GiB")
    if r.get("data_wait_fraction") is not None:
        parts.append(f"data wait {100 * r['data_wait_fraction']:.0f}%")
    return " | ".join(parts)


def _hint_lines(s: dict) -> list[str]:
    return [f"hint [{h['id']}]: {h['message']} ({h['evidence']}); try: {h['fix']}" for h in s.get("hints") or []]


@click.command()
@click.argument("run_dir", type=click.Path(), required=False)
@click.option("--once", is_flag=True, help="Print the state once and exit (non-zero when stalled or dead).")
@click.option("--interval", type=float, default=2.0, show_default=True, help="Seconds between refreshes.")
@click.option("--json", "as_json", is_flag=True, help="Print the state once as JSON (with the latest device sample and hints).")
def monitor(run_dir, once, interval, as_json):
    """Live view of the newest (or given) run from its heartbeat and metrics: loss, throughput,
    device utilization, memory, power, and hints; says "stalled" when the heartbeat is old and
    "dead" when its process is gone."""
    d = resolve_run(run_dir)
    from envkit.console import is_tty

    if as_json:
        s = run_state(d)
        click.echo(json.dumps(s, indent=2, default=str))
        raise SystemExit(1 if s["status"] in ("stalled", "dead", "failed", "nan") else 0)
    if once or not is_tty():
        shown: set[str] = set()
        while True:
            s = run_state(d)
            click.echo(_line(s))
            for line in _hint_lines(s):
                if line.split(":")[0] not in shown:  # each hint once per monitor session
                    shown.add(line.split(":")[0])
                    click.echo(line)
            if once or s["status"] not in ("running", "new"):
                break
            time.sleep(interval)
        if s["status"] in ("stalled", "dead", "failed", "nan"):
            raise SystemExit(1)
        return
    from rich.live import Live

    with Live(refresh_per_second=4) as live:
        while True:
            s = run_state(d)
            live.update(_rich_view(s, _metrics(d)))
            if s["status"] not in ("running", "new"):
                break
            time.sleep(interval)


def _rich_view(s: dict, rows: list[dict]):
    """Status line; a table of the last steps (loss, throughput, utilization, memory, data wait)
    beside the device panel; hints in yellow underneath."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from envkit.train.telemetry import fmt_duration, fmt_rate

    head = Text(f"{s['experiment']}/{s['run']}  {s['status']}  step {s['step'] if s['step'] is not None else '-'}/{s['max_steps'] or '-'}"
                f"  loss {_fmt(s.get('loss'))}  best val {_fmt(s.get('best_val_loss'))}"
                + (f"  ETA {fmt_duration(s['eta_seconds'])}" if s.get("eta_seconds") is not None else ""),
                style={"running": "bold green", "stalled": "bold yellow", "dead": "bold red"}.get(s["status"] or "", "bold"))
    t = Table("step", "loss", "rate", "util", "mem GiB", "data wait", box=None, padding=(0, 1))
    for r in [r for r in rows if "loss" in r][-8:]:
        rate = r.get("tokens_per_second") or r.get("samples_per_second")
        t.add_row(str(r["step"]), f"{r['loss']:.4f}", fmt_rate(rate),
                  "-" if r.get("device_util_pct") is None else f"{r['device_util_pct']:.0f}%",
                  "-" if r.get("device_mem_used_mb") is None else f"{r['device_mem_used_mb'] / 1024:.1f}",
                  "-" if r.get("data_wait_fraction") is None else f"{100 * r['data_wait_fraction']:.0f}%")
    device = Table.grid(padding=(0, 2))
    device.add_row(t, Panel(_device_line(s.get("latest") or {}).replace(" | ", "\n") or "no device sample yet", title="device"))
    hints = [Text(line, style="yellow") for line in _hint_lines(s)]
    return Group(head, device, *hints)


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
    dev = [r for r in train if "device_util_pct" in r or "device_mem_used_mb" in r or "torch_allocated_mb" in r
           or "data_wait_fraction" in r]
    if dev:
        fig, axes = plt.subplots(3, 2, figsize=(11, 10), sharex="col")
        (ax1, ax2), (ax3, ax4), (ax5, ax6) = axes
        _plot_device(dev, ax3, ax4, ax5, ax6)
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    if val:
        ax1.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="val")
    ax1.set_xlabel("step"), ax1.set_ylabel("loss"), ax1.legend(), ax1.set_title(f"{d.parent.name}/{d.name}")
    key = "tokens_per_second" if any("tokens_per_second" in r for r in train) else "samples_per_second"
    ax2.plot([r["step"] for r in train], [r.get(key) or 0 for r in train])
    ax2.set_xlabel("step"), ax2.set_ylabel(key.replace("_", " "))
    ax1.set_xlabel("step" if not dev else ""), ax2.set_xlabel("step" if not dev else "")
    out = Path(output) if output else d / "curves.png"
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    click.echo(f"wrote {out}")


def _plot_device(rows: list[dict], ax_util, ax_mem, ax_wait, ax_power) -> None:
    """Utilization and memory under the loss curve; data wait and power beside them."""
    steps = [r["step"] for r in rows]

    def series(key):
        return [r.get(key) for r in rows]

    if any(v is not None for v in series("device_util_pct")):
        ax_util.plot(steps, series("device_util_pct"), label="device")
    if any(v is not None for v in series("cpu_pct")):
        ax_util.plot(steps, series("cpu_pct"), label="process CPU")
    ax_util.set_ylabel("utilization %"), ax_util.set_ylim(bottom=0), ax_util.legend(loc="best")
    for key, label in (("device_mem_used_mb", "device in use"), ("torch_allocated_mb", "torch allocated"),
                       ("torch_reserved_mb", "torch reserved"), ("rss_mb", "process RSS")):
        if any(v is not None for v in series(key)):
            ax_mem.plot(steps, [None if v is None else v / 1024 for v in series(key)], label=label)
    totals = [v for v in series("device_mem_total_mb") if v]
    if totals:
        ax_mem.axhline(max(totals) / 1024, color="red", linestyle="--", label="limit")
    ax_mem.set_ylabel("memory GiB"), ax_mem.legend(loc="best")
    ax_wait.plot(steps, [None if v is None else 100 * v for v in series("data_wait_fraction")])
    ax_wait.set_ylabel("data wait % of step"), ax_wait.set_xlabel("step"), ax_wait.set_ylim(0, 100)
    if any(v is not None for v in series("power_w")):
        ax_power.plot(steps, series("power_w"))
        ax_power.set_ylabel("power W")
    else:
        ax_power.text(0.5, 0.5, "power: not reported here", ha="center", va="center", transform=ax_power.transAxes)
    ax_power.set_xlabel("step")
