"""Where the time to the first step goes: ENVKIT_TIMING=1 makes the trainer's process write one line
per phase to stderr, `envkit-timing <unix time> <phase>`, from its own creation (read from /proc)
to the end of the first steps, and torch's own compile timers of the first step beside them
(`envkit-timing <unix time> torch {json}`). benchmarks/bench_time_to_first_step.py reads the lines
(stdout and stderr of `envkit run` together), puts them on its own clock (the parent's start is its
zero) and prints the breakdown. Off by default: one environment lookup at import, and `mark`
returns at once. ENVKIT_TIMING_PROFILE=FILE also profiles the process with cProfile from the
child's start to the end of the first step and writes the stats to FILE (pstats format).

Only the wall clock is used (time.time): the lines of two processes, the parent's and the child's,
are put on one axis by the reader. While timing is on, the steps that follow the first are waited
for (a device sync) so that their line says when they ended, CUDA-graph recording included: a
diagnostic mode, not a way to train."""

from __future__ import annotations

import json
import os
import sys
import time

ON = os.environ.get("ENVKIT_TIMING", "") not in ("", "0")
PREFIX = "envkit-timing"
STEPS = 3  # the steps after which a line is written (the first, and the ones that record CUDA graphs)
_profile = None
in_first_step = True  # until the first step's end: the step's own lines (train/run/step.py)


def mark(phase: str, at: float | None = None) -> None:
    """One line: when `phase` ended (now, or `at`, a unix time)."""
    if ON:
        sys.stderr.write(f"{PREFIX} {time.time() if at is None else at:.4f} {phase}\n")
        sys.stderr.flush()


def mark_json(phase: str, data: dict) -> None:
    if ON:
        sys.stderr.write(f"{PREFIX} {time.time():.4f} {phase} {json.dumps(data, sort_keys=True)}\n")
        sys.stderr.flush()


def process_created() -> float | None:
    """When this process was created (its fork), as a unix time: /proc/self/stat's start time (clock
    ticks since boot) against /proc/uptime's seconds since boot, read now (both to 10 ms); None where
    there is no /proc."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def child_started() -> None:
    """At the top of the trainer's process: its creation, then the moment its own code runs; and the
    profiler, if asked for."""
    global _profile
    if not ON:
        return
    created = process_created()
    if created is not None:
        mark("child process created (envkit run's parent: start, imports, config, plan, run folder)", created)
    mark("child: Python started, envkit's modules imported")
    if os.environ.get("ENVKIT_TIMING_PROFILE"):
        import cProfile

        _profile = cProfile.Profile()
        _profile.enable()


def first_step_ended() -> None:
    """After the first step's sync: torch's compile timers so far, and the profile written."""
    global _profile, in_first_step
    if not ON:
        return
    in_first_step = False
    try:
        from torch._dynamo.utils import compile_times

        names, values = compile_times(repr="csv", aggregate=True)
        mark_json("torch", {str(n): round(float(str(v)), 3) for n, v in zip(names, values) if float(str(v)) >= 0.01})
    except Exception:  # noqa: BLE001 - torch's private helper: the phase lines do without it
        pass
    if _profile is not None:
        _profile.disable()
        _profile.dump_stats(os.environ["ENVKIT_TIMING_PROFILE"])
        _profile = None
