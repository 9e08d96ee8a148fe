"""What the trainer's loop calls to watch the device (rank 0 only), in a few lines:

    watch = RunWatch(run_dir, cfg.run_dict(), device_type, device, log, enabled=master, telemetry=tel)
    x, y = watch.next_batch(loader_iterator)   # times the wait for data
    watch.on_log(row)                       # adds data_wait_fraction and the latest device sample
    summary.update(watch.finish())          # averages and hints; stops the sampler and trackers

The device sampler runs in its own thread; the heartbeat carries its latest sample and the
current hints; trackers receive every metrics row."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING


from envkit.train.watching.diagnose import HintContext, after_warmup, diagnose
from envkit.train.watching.trackers import Trackers
from envkit.train.watching.cpu_fallback import FallbackCounter
from envkit.train.watching.device_sampler import DeviceSampler

if TYPE_CHECKING:
    from envkit.train.watching.device_sampler import DeviceSampler
    from envkit.facts.model import TrainDevice

ROWS_KEPT = 50
# What a sample taken before the first step ended says nothing about: the device was compiling,
# loading or waiting, and its 0% is not the training's. Unknown until a sample of the training.
UTILIZATION_KEYS = ("device_util_pct", "renderer_util_pct")


class RunWatch:
    def __init__(self, run_dir: Path, values: dict, device_type: TrainDevice, device, log: Callable[[str], None], *,
                 enabled: bool = True, telemetry=None, local_devices: int = 1):
        L = values.get("logging", {})
        self.enabled, self.log = enabled, log
        self.context = HintContext.from_config(values, device_type)
        self._wait = 0.0
        self._last_step: int | None = None
        self._rows: list[dict] = []
        self._hints: dict[str, dict] = {}
        self.sampler: DeviceSampler | None = None
        self.trackers = Trackers(L.get("trackers") or [], run_dir, values, log) if enabled else Trackers([], run_dir, values, log)
        if enabled and (L.get("device_seconds") or 0) > 0:
            self.sampler = DeviceSampler(device_type, device, interval=float(L["device_seconds"]), local_devices=local_devices).start()

        self.fallbacks = FallbackCounter()  # operators PyTorch ran on the CPU (MPS fallback warnings)
        self._unwatch = self.fallbacks.watch_warnings() if enabled else (lambda: None)
        if telemetry is not None and enabled:
            telemetry.extra_fields = self.heartbeat_fields
            telemetry.sinks.append(self.trackers.log)

    def next_batch(self, batches):
        t0 = time.perf_counter()
        batch = next(batches)
        self._wait += time.perf_counter() - t0
        return batch

    def on_log(self, row: dict) -> None:
        """Complete a training row (before it is written): data-wait share of the interval's
        training time, the newest device sample; then judge the hints (each is logged once)."""
        step = row.get("step", 0)
        steps = step - self._last_step if self._last_step is not None and step > self._last_step else max(1, step)
        self._last_step = step
        train_seconds = (row.get("dt_ms") or 0) / 1000 * steps
        if train_seconds > 0:
            row["data_wait_fraction"] = round(min(1.0, self._wait / train_seconds), 4)
        self._wait = 0.0
        sample = self.sampler.latest() if self.sampler else None
        if sample is not None:
            row.update(self.sampled(sample))
        if not self.enabled:
            return
        self._rows = (self._rows + [row])[-ROWS_KEPT:]
        for hint in diagnose(self._rows, self.context):
            if hint.id not in self._hints:
                self.log(hint.line())
            self._hints[hint.id] = hint.to_dict()

    def first_step_done(self, compiling: bool | None = None) -> None:
        """The first step of this attempt has ended (compilation in it): the device's utilization is
        sampled from now on; `compiling` tells the hints whether torch.compile is on."""
        if self.sampler is not None:
            self.sampler.training_started()
        if compiling is not None:
            self.context = replace(self.context, compile=compiling)

    def sampled(self, sample) -> dict:
        """A sample's figures, its utilization left out (unknown) when it was taken before the first
        step ended."""
        assert self.sampler is not None  # a sample comes from the sampler
        if self.sampler.in_training(sample):
            return dict(sample.metrics)
        return {k: v for k, v in sample.metrics.items() if k not in UTILIZATION_KEYS}

    def heartbeat_fields(self) -> dict:
        out = {}
        sample = self.sampler.latest() if self.sampler else None
        if sample is not None:
            out["device"] = {k: v for k, v in sample.to_dict().items() if k in self.sampled(sample) or k not in sample.metrics}
        if self._hints:
            out["hints"] = list(self._hints.values())
        return out

    def finish(self) -> dict:
        """Fields for summary.json; stops the sampler and closes the trackers."""
        out = {}
        if self.sampler is not None:
            self.sampler.stop()
            out.update(self.sampler.summary())
        waits = [r["data_wait_fraction"] for r in after_warmup(self._rows) or self._rows if "data_wait_fraction" in r]
        if waits:
            out["avg_data_wait_fraction"] = round(sum(waits) / len(waits), 4)
        out["hints"] = list(self._hints.values())
        self._unwatch()
        self.fallbacks.add_to(out)
        if out["cpu_fallbacks"]:
            self.log(f"hint [cpu-fallback]: {out['hints'][-1]['message']}; try: {out['hints'][-1]['fix']}")
        self.trackers.close()
        return out
