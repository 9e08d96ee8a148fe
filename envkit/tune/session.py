"""`envkit tune` end to end: measure within the budget, then write the tuned profile (or nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envkit.bench.context import BenchContext
from envkit.checks.recommend import tuned_name
from envkit.errors import EnvkitError
from envkit.resources import user_dir
from envkit.tune.search import TuneResult, tune
from envkit.tune.writer import render_profile, source_line, write_profile


@dataclass
class TuneOutcome:
    result: TuneResult
    profile: str | None = None  # the name written, None when nothing was
    path: Path | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        r = self.result
        return {"profile": self.profile, "path": str(self.path) if self.path else None, "extends": r.base,
                "device": r.device, "model": r.model,
                "settings": [{"section": d.section, "key": d.key, "value": d.value, "reason": d.reason, "changed": d.changed}
                             for d in r.decisions],
                "runs": r.runs, "stopped": r.stopped, "budget_s": r.budget_s, "elapsed_s": r.elapsed_s,
                "notes": r.notes + self.notes}


def parse_budget(text: str, where: str = "--budget") -> float:
    """'5m', '90s', '1h', '2m30s' or plain seconds -> seconds."""
    import re

    t = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*(h|m|s)", t)
        if not parts or "".join(f"{n}{u}" for n, u in parts) != t.replace(" ", ""):
            raise EnvkitError(f"not a duration: {text!r}", where=where, fix="write e.g. 5m, 90s or 1h")
        seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
    if seconds <= 0:
        raise EnvkitError("the budget must be positive", where=where, fix="write e.g. 5m")
    return seconds


def run_tune(ctx: BenchContext, budget_s: float, *, on_run=None, dry_run: bool = False, seconds: float | None = None,
             on_start=None, on_progress=None, no_compile: bool = False, debug: bool = False) -> TuneOutcome:
    result = tune(ctx, budget_s, seconds=seconds, on_start=on_start, on_progress=on_progress, on_run=on_run,
                  no_compile=no_compile, debug=debug)
    out = TuneOutcome(result)
    if not result.decisions:
        out.notes.append("nothing measured to a decision: no profile written")
        return out
    name = tuned_name(ctx.shipped_profile)  # the name doctor looks for on this machine
    path = user_dir() / f"{name}.toml"
    text = render_profile(name, result.base, result.decisions, source_line(ctx.facts, ctx.model, ctx.target),
                          getattr(ctx.facts.torch, "base_version", None),
                          f"{result.base}, tuned on this machine by envkit tune ({ctx.model} on {ctx.target})")
    if dry_run:
        out.notes.append(f"--dry-run: would write {path}")
        out.profile, out.path = name, None
        return out
    out.path = write_profile(path, text)
    out.profile = name
    shadow = Path.cwd() / "profiles" / f"{name}.toml"
    if shadow.is_file():
        out.notes.append(f"{shadow} has the same name and wins over the tuned profile in this project")
    return out
