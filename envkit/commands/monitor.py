"""`envkit monitor`: a live view of one run from its heartbeat and metrics (no torch)."""

from __future__ import annotations

import time

import click

from envkit.console import print_json, is_tty
from envkit.runfolder.find import read_metrics, resolve_run
from envkit.train.watching.telemetry import fmt_duration, fmt_rate

QUIET_HINT_SECONDS = 120  # an exec run whose command printed nothing and logged no metric for this long


def _fmt(x, spec=".4f"):
    return "-" if x is None else format(x, spec)


def _line(s: dict) -> str:
    step = f"step {s['step'] if s['step'] is not None else '-'}/{s['max_steps'] or '-'}"
    parts = [f"{s['experiment']}/{s['run']}", s["status"] or "?", step, f"loss {_fmt(s.get('loss'))}",
             f"best val {_fmt(s.get('best_val_loss'))}"]
    if s["status"] in ("running",) and s.get("eta_seconds") is not None:
        parts.append(f"ETA {fmt_duration(s['eta_seconds'])}")
    if s.get("age_seconds") is not None and s["status"] in ("running", "stalled", "dead", "orphaned"):
        parts.append(f"heartbeat {fmt_duration(s['age_seconds'])} ago")
    if s["status"] in ("running", "stalled") and (s.get("quiet_seconds") or 0) >= QUIET_HINT_SECONDS:
        parts.append(f"no output for {s['quiet_seconds'] / 60:.0f} minutes")
    device = _device_line(s.get("latest") or {})
    return " | ".join(parts) + (f" | {device}" if device else "")


def _gib_of_total(v, r) -> str:
    total = f"/{r['device_mem_total_mb'] / 1024:.1f}" if r.get("device_mem_total_mb") else ""
    return f"mem {v / 1024:.1f}{total} GiB"


# (metrics key, how it reads in the line), in the order shown
_DEVICE_FIELDS = (
    ("device_util_pct", lambda v, r: f"util {v:.0f}%"),
    ("device_mem_used_mb", _gib_of_total),
    ("torch_allocated_mb", lambda v, r: f"torch {v / 1024:.2f} GiB"),
    ("power_w", lambda v, r: f"power {v:.0f}W"),
    ("temp_c", lambda v, r: f"{v:.0f}C"),
    ("system_mem_free_pct", lambda v, r: f"system memory {v:.0f}% free"),
    ("cpu_pct", lambda v, r: f"cpu {v:.0f}%"),
    ("rss_mb", lambda v, r: f"rss {v / 1024:.2f} GiB"),
    ("data_wait_fraction", lambda v, r: f"data wait {100 * v:.0f}%"),
)


def _device_line(r: dict) -> str:
    """"12.3k tok/s | util 97% | mem 71.2/79.6 GiB | torch 60.1 GiB | power 612W | 66C | cpu 101% | rss 3.1 GiB | data wait 2%"."""
    parts = []
    rate = r.get("tokens_per_second") or r.get("samples_per_second")
    if rate:
        parts.append(f"{fmt_rate(rate)} {'tok/s' if r.get('tokens_per_second') else 'samples/s'}")
    for key, show in _DEVICE_FIELDS:
        if r.get(key) is not None:
            parts.append(show(r[key], r))
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
    device utilization, memory, power, and hints; says "stalled" when the heartbeat is old,
    "orphaned" while its command outlives its supervisor, "killed" once nothing runs in it."""
    from envkit.train.watching.folder_status import run_state  # judging a run: not on `monitor --help` (LAZY_OK)

    d = resolve_run(run_dir)
    if as_json:
        s = run_state(d, noticed_by="envkit monitor")
        print_json(s)
        raise SystemExit(1 if s["status"] in ("stalled", "dead", "killed", "orphaned", "failed", "nan") else 0)
    if once or not is_tty():
        shown: set[str] = set()
        while True:
            s = run_state(d, noticed_by="envkit monitor")
            click.echo(_line(s))
            for line in _hint_lines(s):
                if line.split(":")[0] not in shown:  # each hint once per monitor session
                    shown.add(line.split(":")[0])
                    click.echo(line)
            if once or s["status"] not in ("running", "new"):
                break
            time.sleep(interval)
        if s["status"] in ("stalled", "dead", "killed", "orphaned", "failed", "nan"):
            raise SystemExit(1)
        return
    from rich.live import Live

    with Live(refresh_per_second=4) as live:
        while True:
            s = run_state(d, noticed_by="envkit monitor")
            live.update(_rich_view(s, read_metrics(d)))
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

    head = Text(f"{s['experiment']}/{s['run']}  {s['status']}  step {s['step'] if s['step'] is not None else '-'}/{s['max_steps'] or '-'}"
                f"  loss {_fmt(s.get('loss'))}  best val {_fmt(s.get('best_val_loss'))}"
                + (f"  ETA {fmt_duration(s['eta_seconds'])}" if s.get("eta_seconds") is not None else "")
                + (f"  no output for {s['quiet_seconds'] / 60:.0f} minutes" if (s.get("quiet_seconds") or 0) >= QUIET_HINT_SECONDS else ""),
                style={"running": "bold green", "stalled": "bold yellow", "dead": "bold red", "killed": "bold red",
                       "orphaned": "bold red"}.get(s["status"] or "", "bold"))
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
