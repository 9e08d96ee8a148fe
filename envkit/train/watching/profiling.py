"""`envkit run --profile-steps A:B`: a torch.profiler trace of optimizer steps A to B (inclusive,
counted from 1 like the progress line), written into the run folder as a Chrome trace
(`profile_steps_A-B.json`, open it in chrome://tracing or https://ui.perfetto.dev) plus the
operators that took the most time (`profile_steps_A-B.txt`). With several processes each rank
writes its own (`..._rank1.json`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_text
from envkit.train.watching.trace_breakdown import breakdown, render, top_kernels

if TYPE_CHECKING:
    from torch.profiler import profile, record_function
    from envkit.facts.model import TrainDevice


def parse_profile_steps(text: str | None) -> tuple[int, int] | None:
    """`--profile-steps A:B` -> (A, B): optimizer steps A to B inclusive, 1 <= A <= B. Read by
    `envkit run` (the user's option) and by the trainer's process (the same text, passed on)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise EnvkitError(f"{text!r} is not A:B with 1 <= A <= B", where="--profile-steps",
                          fix="e.g. --profile-steps 20:25 (after compilation and warm-up; a few steps make a readable trace)")
    return int(m.group(1)), int(m.group(2))


class StepProfiler:
    def __init__(self, run_dir: Path, steps: tuple[int, int] | None, device_type: TrainDevice, rank: int, world: int, log):
        self.run_dir, self.steps, self.device_type, self.log = Path(run_dir), steps, device_type, log
        self.suffix = f"_rank{rank}" if world > 1 else ""
        self.prof: profile | None = None
        self.first: int | None = None
        self.last: int | None = None
        self.span: record_function | None = None

    def before_step(self, step: int) -> None:
        """`step` optimizer steps are done; the next one is step + 1."""
        if self.prof is None and self.steps is None:
            return  # the common case: no profiling, nothing per step
        from torch.profiler import ProfilerActivity, profile, record_function

        if self.prof is None:
            if self.steps is None or not self.steps[0] <= step + 1 <= self.steps[1]:
                return
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device_type == "cuda" else [])
            # acc_events: one window per run, so nothing to accumulate, but without it torch 2.11 warns
            # "Profiler clears events at the end of each cycle" on every rank (seen on 2 x H200)
            import inspect

            acc: dict[str, Any] = {"acc_events": True} if "acc_events" in inspect.signature(profile.__init__).parameters else {}
            self.prof = profile(activities=activities, record_shapes=True, **acc)
            self.prof.__enter__()
            self.first = step + 1
        self.span = record_function(f"envkit step {step + 1}")  # one span per optimizer step in the trace
        self.span.__enter__()

    def after_step(self, step: int) -> None:
        if self.prof is not None:
            self._end_span()
            self.last = step
            if self.steps is not None and step >= self.steps[1]:  # steps is None only after _write
                self._write()

    def close(self) -> None:
        """The run ended (or failed) inside the window: keep what was recorded."""
        if self.prof is not None:
            self._write()

    def _end_span(self) -> None:
        if self.span is not None:
            self.span.__exit__(None, None, None)
            self.span = None

    def _write(self) -> None:
        self._end_span()
        prof, self.prof = self.prof, None
        a = self.first
        assert prof is not None and a is not None  # called only while a window records (before_step set both)
        prof.__exit__(None, None, None)
        b = self.last if self.last is not None else a
        stem = self.run_dir / f"profile_steps_{a}-{b}{self.suffix}"
        tmp = stem.with_name(stem.name + f".{os.getpid()}.tmp.json")
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, stem.with_suffix(".json"))  # atomic: a reader never sees half a trace
        sort = "self_cuda_time_total" if self.device_type == "cuda" else "self_cpu_time_total"
        table = prof.key_averages().table(sort_by=sort, row_limit=30)

        timeline = ""
        if self.device_type == "cuda":  # the device's own timeline: what the kernels did, idle and exposed communication
            import json

            trace = json.loads(stem.with_suffix(".json").read_text())
            summary = breakdown(trace, steps=b - a + 1)
            if summary:
                timeline = render(summary, top_kernels(trace)) + "\n\n"
        atomic_write_text(stem.with_suffix(".txt"), timeline + table + "\n")
        self.steps = None  # one window per run
        self.log(f"profile of steps {a}-{b} written: {stem.with_suffix('.json').name} (chrome trace), {stem.with_suffix('.txt').name}")
