"""Metrics from what a script prints: most training scripts print their progress (`iter 10: loss
3.1234, time 12.1ms`, `step 20: train loss 4.1, val loss 4.2`, `| epoch 1 | 200/2983 batches | lr
20.00 | loss 6.91 |`, `loss=0.31 acc=0.88`) and log nothing else. `envkit exec` reads the command's
output as it passes (supervise.py) and records such lines as metrics.jsonl rows, so `runs`,
`monitor`, `plot`, `sweep` and `reproduce` work on a script nobody edited.

A line counts only when it names a step (`step N`, `iter N`, `it N`, `batch N/M` with its
`epoch E`, `N/M` after an epoch) or, with no step at all, when every one of its fields is a named
number (`loss=0.31 acc=0.88`: the step is then the count of such lines); and when at least one name
is a metric's (loss, accuracy, perplexity, lr, error, reward, score, ...). So "Loading 50000
images", "epoch 1 of 10", "torch 2.13.0", "Using device cuda:0" and a config dump are not metrics.

Each value keeps the text it was printed with (`printed` in the row: the digits after the point),
so `reproduce` compares at the precision the script printed and says so. A pattern of your own
(`--metrics-pattern REGEX`, or `metrics_pattern` under `[tool.envkit]`) replaces the defaults: its
named groups are the metrics, `step` the step."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from envkit.runfolder.applog import append_line, open_append
from envkit.runfolder.names import METRICS

# a name is one or two words (train loss, val_loss, ms/batch), then `:` `=` or a space, then a number
_NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
_PAIR = re.compile(rf"(?<![\w.])([A-Za-z][\w/%]*(?:[ _][A-Za-z][\w/%]*)?)['\"]?\s*(?:[:=]\s*|\s+)({_NUMBER})(%?)(?![\w.])")
_STEP = re.compile(r"(?<![\w.])(?:step|iter|iteration|it)\s*[:=#]?\s*(\d+)(?:\s*/\s*\d+)?(?![\w.])", re.IGNORECASE)
_EPOCH = re.compile(r"(?<![\w.])epoch\s*[:=#]?\s*(\d+)(?:\s*/\s*\d+)?", re.IGNORECASE)
_BATCHES = re.compile(r"(?<![\w.])(\d+)\s*/\s*(\d+)\s*(?:batches|batch|steps|it)?(?![\w.])")
_METRIC_WORD = re.compile(r"loss|acc|accuracy|ppl|perplexity|lr|err|error|mse|mae|rmse|f1|bleu|rouge|auc|reward|score|"
                          r"top1|top5|grad|norm|nll|kl|wer|cer|precision|recall|iou|dice|psnr|ssim|return", re.IGNORECASE)
_STEP_NAMES = {"step", "iter", "iteration", "it", "epoch", "batch", "batches"}
_SETTING = re.compile(r"^(lr|learning_rate|grad_clip|grad_norm_clip|weight_decay|warmup\w*|max_norm)$")  # printed by config dumps too


@dataclass
class Scalars:
    """Parses a command's lines into metrics rows; `rows` counts those it made."""

    pattern: re.Pattern | None = None  # a user's own: its named groups are the metrics, `step` the step
    rows: int = 0
    _unstepped: int = 0
    _epoch_len: dict[int, int] = field(default_factory=dict)

    def parse(self, line: str) -> dict | None:
        """{step, name: value, ..., printed: {name: decimals}} for a metrics line, else None."""
        line = line.strip()
        if not line or len(line) > 2000:
            return None
        row = self._own(line) if self.pattern is not None else self._default(line)
        if row is not None:
            self.rows += 1
        return row

    def _own(self, line: str) -> dict | None:
        assert self.pattern is not None
        m = self.pattern.search(line)
        if m is None:
            return None
        values, printed = {}, {}
        for name, text in m.groupdict().items():
            if name == "step" or text is None:
                continue
            try:
                values[name] = float(text)
            except ValueError:
                continue
            printed[name] = _decimals(text)
        if not values:
            return None
        step = m.groupdict().get("step")
        if step is None:
            self._unstepped += 1
        return {"step": int(step) if step is not None and step.isdigit() else self._unstepped, **values, "printed": printed}

    def _default(self, line: str) -> dict | None:
        step = self._step(line)
        pairs = [(name, text, pct) for name, text, pct in _PAIR.findall(line)]
        values, printed = {}, {}
        for name, text, pct in pairs:
            key = re.sub(r"[^\w]+", "_", name.strip().lower()).strip("_")
            if key in _STEP_NAMES or not key or key in values:
                continue
            values[key] = float(text) / (100 if pct else 1) if pct else float(text)
            printed[key] = _decimals(text) + (2 if pct else 0)
        if not any(_METRIC_WORD.search(k) for k in values):
            return None
        if step is None:
            # no step named: only a line of nothing but named numbers counts (`loss=0.31 acc=0.88`),
            # and one of them a measured metric, not a setting a config dump prints (`lr: 0.001`)
            rest = _PAIR.sub("", line)
            if re.search(r"[A-Za-z]{2,}", rest) or all(_SETTING.match(k) or not _METRIC_WORD.search(k) for k in values):
                return None
            self._unstepped += 1
            step = self._unstepped
        return {"step": step, **values, "printed": printed}

    def _step(self, line: str) -> int | None:
        m = _STEP.search(line)
        if m:
            return int(m.group(1))
        epoch = _EPOCH.search(line)
        if epoch:
            batches = _BATCHES.search(line[epoch.end():])
            if batches:  # `| epoch 3 | 200/2983 batches |`: the step counts on across epochs
                e, b, n = int(epoch.group(1)), int(batches.group(1)), int(batches.group(2))
                self._epoch_len[e] = n
                return sum(self._epoch_len.get(i, n) for i in range(1, e)) + b
            if not self._epoch_len:  # `Epoch 3/10, Loss: 0.54`: a line per epoch, the epoch is the step
                return int(epoch.group(1))
        return None


def _decimals(text: str) -> int:
    """Digits after the point as printed (`3.1234` -> 4, `1e-3` -> 3, `7` -> 0)."""
    mantissa, _, exponent = text.lower().partition("e")
    digits = len(mantissa.partition(".")[2])
    return max(0, digits - int(exponent or 0))


class PrintedMetrics:
    """The supervisor's end of scalars: each line of the command's output parsed, a metrics row
    appended to RUN/metrics.jsonl (whole lines, never through a link: runfolder/applog.py), marked
    `"source": "printed"`. A script that logs through `envkit.track` wins: once metrics.jsonl holds
    a row this class did not write, it stops, and readers drop printed rows where logged ones exist
    (runfolder/metrics.py)."""

    def __init__(self, run_dir, pattern: str | None):
        self.path = Path(run_dir) / METRICS
        self.off = pattern == "off"
        self.scalars = Scalars(pattern=re.compile(pattern) if pattern and pattern != "off" else None)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._expected: int | None = None  # the file's size after our last append

    def feed(self, line: str) -> None:
        if self.off:
            return
        row = self.scalars.parse(line)
        if row is None:
            return
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = open_append(self.path)
                    self._expected = 0  # only the script (envkit.track) writes here besides us: a row before ours is its
                if os.fstat(self._fd).st_size != self._expected:  # the script logged a row of its own (its prints
                    # may reach us after its rows: a pipe's buffer is flushed when it exits)
                    self.off = True
                    return
                data = (json.dumps({**row, "time": round(time.time(), 3), "source": "printed"}) + "\n").encode()
                append_line(self._fd, data, self.path)
                self._expected = os.fstat(self._fd).st_size
            except OSError:
                self.off = True  # a full disk: train.log still has every line

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
