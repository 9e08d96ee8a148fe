"""Progress while bench or tune measures: on a terminal a rich display (the rung or candidate, its
elapsed time, the running figure after each timed window); otherwise one plain line per rung as it
finishes, with its figure. Both write to stderr, so stdout stays the report (or --json)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal

from envkit.bench.spec import ResultStatus, rate_unit
from envkit.console import console

if TYPE_CHECKING:
    from envkit.train.run.state import RateUnit


def figure(per_second, unit: RateUnit) -> str:
    return f"{per_second:,.0f} {unit}/s" if per_second else ""


class Progress:
    def __init__(self, *, tty: bool, quiet: bool = False):
        self.tty, self.quiet = tty and not quiet, quiet
        self._live = self._task = None

    def __enter__(self):
        if self.tty:
            from rich.progress import Progress as RichProgress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._live = RichProgress(SpinnerColumn(), TextColumn("{task.description:<28}"), TimeElapsedColumn(),
                                      TextColumn("{task.fields[figure]}"), console=console(stderr=True), transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.__exit__(*exc)

    def start(self, name: str) -> None:
        if self._live is not None:
            self._task = self._live.add_task(name, total=None, figure="warming up")

    def update(self, name: str, data: dict) -> None:
        if self._live is not None and self._task is not None:
            what = figure(data.get("per_second"), rate_unit(data.get("unit")))
            self._live.update(self._task, figure=f"{what} (window {data.get('window')}/{data.get('windows')})")

    def done(self, name: str, status: ResultStatus | Literal["does not fit"], per_second=None, unit: RateUnit = "samples",
             seconds: float = 0.0, reason: str = "") -> None:
        text = figure(per_second, unit) or reason
        if self._live is not None and self._task is not None:
            self._live.update(self._task, figure=f"{status} {text}", total=1, completed=1)
            self._task = None
        elif not self.quiet:
            print(f"  ... {name}: {status}" + (f" {text}" if text else "") + f" ({seconds:.1f} s)", file=sys.stderr, flush=True)
