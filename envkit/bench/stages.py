"""Runs measured together in stages, each started once (`envkit sweep --pack auto`).

Starting a run costs far more than timing it (the interpreter, torch, the data, torch.compile: about
25 s for ResNet-18 on an H100, against 2 s of timed windows), so the runs are started once and the
counts are timed in turn: run i warms up, writes `warm.i` (the memory it holds) and waits; the parent
writes `go.k` holding a count n (and, on the CPU, the threads each of the n gets: the cores shared
out as the sweep will share them); runs 0..n-1 each time their windows and write `rate.k.i`, the
others wait; then the next stage, until `stop`. Every file is written whole (a rename), so a reader
never sees half of one. The folder is a temporary one: nothing here touches a run folder.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.bench.clock import sync_device
from envkit.train.run.batch_probe import device_memory_mb, peak_mb

if TYPE_CHECKING:
    from envkit.train.run.state import RateUnit

POLL_S = 0.02


def write(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class StagedClock:
    """The child's `on_step` hook (envkit/bench/child.py): warm-up, then the stages it is part of.
    An out-of-memory split starts the warm-up again; the stage it was timing then gets no rate from
    this run, and the parent counts that count as failed."""

    def __init__(self, base, folder: str, index: int, free_before_mb: float | None, run_length: dict | None = None):
        self.base, self.folder, self.index = base, Path(folder), index  # base: a StepClock (its fields and helpers)
        self.free_before_mb = free_before_mb
        self.run_length = run_length or {}  # the real run's epochs and max_steps (this one trains until stopped)
        self.stage, self.stage_rates, self.timing = 0, [], False

    def __getattr__(self, name):  # rates, loss, peak_mb, unit, steps_timed: the base clock's
        return getattr(self.base, name)

    def __call__(self, *, step: int, loss, micro_batch: int, per_step: int, unit: RateUnit, epoch_samples: int = 0) -> bool:
        b = self.base
        phase = b.count(step, loss, micro_batch, unit)
        if phase == "warm-up":
            self.timing = False  # a split starts the warm-up again: no rate from the stage it was timing
            return False
        if phase == "warm":
            self._say_warm(self._run_samples(per_step, epoch_samples))
            b._reset_peak()
            return self._next_stage()
        if not self.timing:
            return False
        b.n += 1
        if time.perf_counter() - b.t0 < b.window_s:
            return False
        self.stage_rates.append(b.close_window(per_step))
        if len(self.stage_rates) < b.windows:
            b._start_window()
            return False
        b._read_peak()
        rate = {"per_second": statistics.median(self.stage_rates), "unit": unit}
        if b.device_type == "cpu":
            import torch

            rate["threads"] = torch.get_num_threads()  # what this stage trained with: said in the pack line
        write(self.folder / f"rate.{self.stage}.{self.index}", rate)
        b.rates.extend(self.stage_rates)
        return self._next_stage()

    def _run_samples(self, per_step: int, epoch_samples: int) -> int | None:
        """What the real run trains, in samples (tokens for a token model): its epochs over the data, or
        its max_steps. The parent weighs that against the start (sweep/pack.py)."""
        epochs, steps = self.run_length.get("epochs"), self.run_length.get("max_steps")
        if epochs:
            return int(epochs * epoch_samples) or None
        return int(steps * per_step) if steps else None

    def _say_warm(self, run_samples: int | None) -> None:
        b = self.base
        sync_device(b.device_type)
        b._read_peak()
        # as bench's measure() says it: what this process took from the device (its context and cache
        # included), the free memory it started with, its peak; on the CPU its resident peak
        memory = {"peak_memory_mb": b.peak_mb, "rss_peak_mb": peak_mb("cpu"), "device_free_mb": self.free_before_mb,
                  "run_samples": run_samples}
        free_after = device_memory_mb("cuda")[1] if b.device_type == "cuda" and self.free_before_mb is not None else None
        if self.free_before_mb is not None and free_after is not None:
            memory["device_used_mb"] = self.free_before_mb - free_after
        write(self.folder / f"warm.{self.index}", memory)

    def _next_stage(self) -> bool:
        """Wait for the next stage this run is part of (True: stop training)."""
        self.timing = False
        while True:
            if (self.folder / "stop").exists():
                return True
            go = read(self.folder / f"go.{self.stage + 1}")
            if go is None:
                time.sleep(POLL_S)
                continue
            self.stage += 1
            if self.index < int(go["n"]):
                if go.get("threads"):  # CPU runs side by side share the cores, as the sweep's runs will
                    import torch

                    torch.set_num_threads(int(go["threads"]))
                self.stage_rates, self.timing = [], True
                self.base._start_window()
                return False


class Stages:
    """The parent's side: the folder, and waiting on what the runs write there."""

    def __init__(self, folder: str, alive):
        self.folder, self.alive, self.stage = Path(folder), alive, 0  # alive(i): run i has not exited

    def wait_warm(self, indices, timeout: float) -> dict[int, dict | str]:
        """{i: its warm.i memory, or why it is not warm (it exited first, or the timeout)}."""
        return self._wait({i: self.folder / f"warm.{i}" for i in indices}, timeout)

    def time(self, n: int, timeout: float, threads: int | None = None) -> dict[int, dict | str]:
        """Runs 0..n-1 timed at once: {i: rate.k.i, or why there is none}. threads: the CPU threads
        each of them trains with in this stage (torch.set_num_threads), None to leave them as started."""
        self.stage += 1
        write(self.folder / f"go.{self.stage}", {"n": n, **({"threads": threads} if threads else {})})
        return self._wait({i: self.folder / f"rate.{self.stage}.{i}" for i in range(n)}, timeout)

    def stop(self) -> None:
        (self.folder / "stop").touch()

    def _wait(self, paths: dict[int, Path], timeout: float) -> dict[int, dict | str]:
        out: dict[int, dict | str] = {}
        deadline = time.monotonic() + timeout
        while len(out) < len(paths):
            for i, path in paths.items():
                if i in out:
                    continue
                data = read(path)
                if data is not None:
                    out[i] = data
                elif not self.alive(i):
                    out[i] = self._exited(i, path)
            if len(out) < len(paths):
                if time.monotonic() > deadline:
                    return {i: out.get(i, f"nothing within {timeout:.0f} s") for i in paths}
                time.sleep(POLL_S)
        return out

    def _exited(self, i: int, path: Path):
        data = read(path)  # written just before it exited
        return data if data is not None else "it exited first"
