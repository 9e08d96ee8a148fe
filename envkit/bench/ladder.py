"""The optimization ladder: which rungs exist, which this machine can run (and, if not, which
doctor check says why), and how a measured rung is judged against the CPU fp32 baseline.

Rungs are cumulative: each adds one thing to the rung before it on the same device. A rung that
failed or was skipped does not pass its addition on (the next rung says so in its note).
Everything here is a pure function of the facts, the doctor checks and the measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envkit.checks.gates import V, gates, known
from envkit.config.schema import TrainPrecision

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice

# A rung whose loss departs from the baseline's by more than this (relative) is flagged: after the
# same steps from the same seed, fp32 on another device agrees to well under 1%; bf16/fp16 autocast
# moves it a few percent; more than 10% means the numbers changed, not only the speed.
LOSS_TOLERANCE = 0.10

# The ladder as data. `on`: cpu, or the accelerator ("device"); `target_only`: only listed when the
# machine trains on that device; `adds`: what this rung adds to the previous rung on its device.
LADDER: tuple[dict, ...] = (
    {"name": "cpu fp32", "on": "cpu", "baseline": True},
    {"name": "cpu + compile", "on": "cpu", "target_only": "cpu", "adds": {"compile": True}, "needs": "compile"},
    {"name": "cpu + profile", "on": "cpu", "target_only": "cpu", "adds": {"profile": True}},
    {"name": "{dev} fp32", "on": "device", "needs": "{dev}"},
    {"name": "{dev} + {low}", "on": "device", "adds": {"precision": "low"}, "needs": "bf16"},
    {"name": "{dev} + compile", "on": "device", "adds": {"compile": True}, "needs": "compile"},
    {"name": "{dev} + profile", "on": "device", "adds": {"profile": True}},
    {"name": "{dev} + {fast}", "on": "device", "adds": {"channels_last": True}, "needs": "fast"},
    # after the profile rung, which stays what `envkit run` does: CUDA graphs are the compile rung's
    # compile with mode reduce-overhead, an option a user turns on, not a default
    {"name": "{dev} + cuda graphs", "on": "device", "adds": {"compile_mode": "reduce-overhead"}, "needs": "cudagraphs"},
    {"name": "{dev} + data on device", "on": "device", "adds": {"on_device": True}, "needs": "on_device"},
    # several processes under torchrun, each with everything the last passing single-device rung had:
    # what `envkit run --nproc-per-node N` does. Last, so a --budget that runs out loses these first
    {"name": "{dev} + ddp", "on": "device", "adds": {"parallel": "ddp"}, "needs": "multi"},
    {"name": "{dev} + fsdp", "on": "device", "adds": {"parallel": "fsdp"}, "needs": "multi"},
)

# What a later rung reverts to when the rung that added a setting did not pass (carry_forward).
PLAIN = {"precision": "fp32", "compile_mode": "default"}

# Data sets that can be held on the device (envkit/train/data/on_device.py: CifarImages and
# TensorPairs); the synthetic images and token files are made or read per batch.
ON_DEVICE_DATA = ("cifar10", "cifar100", "npz")


@dataclass
class Rung:
    name: str
    device: TrainDevice
    settings: dict = field(default_factory=dict)  # precision, compile, profile, channels_last
    skip: str | None = None  # why it cannot run here (in full: --json and the saved report)
    check: str | None = None  # the doctor check the skip comes from
    short: str = ""  # the skip in a few words, for one line of the table
    baseline: bool = False
    adds: dict = field(default_factory=dict)
    changes: str = ""  # what it changed over the rung before it, in config keys (describe)

    @property
    def nproc(self) -> int:
        """Processes it trains with (torchrun's --nproc-per-node): 1 but for the data-parallel rungs."""
        return int(self.settings.get("nproc") or 1)


def accelerator(facts) -> TrainDevice:
    """The accelerator this kind of machine would train on: mps on a Mac, cuda elsewhere."""
    return "mps" if getattr(facts, "is_macos", False) else "cuda"


def cuda_devices(facts) -> int:
    """The CUDA devices the target interpreter sees (CUDA_VISIBLE_DEVICES honoured), else the GPUs
    nvidia-smi (or rocm-smi) lists: what torchrun's processes are shared out over, one each."""
    count = (getattr(facts, "runtime", None) or {}).get("device_count")
    if count is not None:
        return int(count)
    return len([g for g in getattr(facts, "gpus", None) or [] if getattr(g, "vendor", "nvidia") in ("nvidia", "amd")])


def multi_skip(dev: TrainDevice, nproc: int, gpus: int) -> tuple[str, str] | None:
    """(why, in short) a data-parallel rung cannot run here, or None: one process per GPU."""
    if dev != "cuda":
        return f"the data-parallel rungs start one process per CUDA GPU: {dev} is one device", "CUDA only"
    if nproc < 2:
        return (f"data parallel needs 2 or more processes, one per GPU: {gpus} CUDA GPU{'s' if gpus != 1 else ''} here"
                + (f", --nproc {nproc}" if nproc != gpus else ""), f"needs 2+ GPUs ({gpus} here)")
    if nproc > gpus:
        return f"--nproc {nproc} asks one GPU each, and {gpus} are here", f"--nproc {nproc} > {gpus} GPUs"
    return None


def low_precision(device: TrainDevice, facts, checks: dict) -> tuple[TrainPrecision | None, str]:
    """(bf16 | fp16 | None, why). bf16 where it is native; fp16 where bf16 is missing or emulated
    (M1/M2: docs/knowledge/mps.md) and fp16 autocast exists (MPS from torch 2.5)."""
    c = checks.get("bf16")
    if device == "cuda":
        return ("bf16", "") if c is None or c.status in ("pass", "skip") else ("fp16", c.message)
    if device == "mps":
        g = gates()
        family = getattr(getattr(facts, "chip", None), "family", None)
        emulated = family in g["bf16"]["mps"].get("emulated_families", [])
        if c is not None and c.status == "pass" and not emulated:
            return "bf16", ""
        tv = V(getattr(getattr(facts, "torch", None), "base_version", None) or "0")
        need = g["autocast"]["mps"]["fp16_torch"]
        if tv is not None and tv >= known(need):
            return "fp16", (f"bf16 is emulated on {family}" if emulated else (c.message if c else "bf16 unavailable"))
        return None, f"no autocast on MPS before torch {need} (installed {getattr(facts.torch, 'base_version', '?')})"
    return None, "the CPU trains in fp32"


def fast_path(device: TrainDevice, model: str) -> tuple[dict, str, str | None]:
    """(settings, label, reason it does not apply) for the last rung: channels_last for the cnn on
    CUDA and MPS (a memory layout of 4-d image tensors: a conv net's; the gpt and the mlp have none,
    so their ladders have no such rung). Fused AdamW is no rung of its own: the trainer's step uses
    it on CUDA, so every CUDA rung has it (a rung measures what `envkit run` does)."""
    if model == "cnn" and device in ("cuda", "mps"):
        return {"channels_last": True}, "channels last", None
    why = "applies to the cnn model only" if device in ("cuda", "mps") else f"applies to the cnn on CUDA and MPS, not {device}"
    return {}, "channels last", f"channels_last {why}: nothing to add"


def data_can_live_on_device(dataset) -> bool:
    """Whether a config's data set (its dataset section, envkit/config/schema.py) can be held on the device
    (dataset.on_device): the CIFAR sets, npz arrays and the synthetic teacher set; not token files, text,
    image folders or factories."""
    return dataset.type in ON_DEVICE_DATA or (dataset.type == "synthetic" and dataset.task == "teacher")


def describe(adds: dict, device: TrainDevice, baseline: bool = False) -> str:
    """What a rung changed over the rung before it on its device, as the config keys a user would set."""
    if baseline:
        return "the reference: fp32 on the CPU, the config as written"
    if not adds:
        return f"device.type: {device}"
    words = {"precision": lambda v: f"training.precision: {v}", "compile": lambda v: "training.compile: true",
             "compile_mode": lambda v: f"training.compile_mode: {v} (CUDA graphs)",
             "profile": lambda v: "the profile's dataloader, [torch] and env settings",
             "channels_last": lambda v: "model.channels_last: true",
             "on_device": lambda v: "dataset.on_device: true (the rungs before: false)",
             "parallel": lambda v: f"training.parallel: {v}", "nproc": lambda v: f"{v} processes (torchrun --nproc-per-node {v})"}
    return "; ".join(words[k](v) if k in words else f"{k}: {v}" for k, v in adds.items())


def build_ladder(facts, checks: dict, target: TrainDevice, model: str, *, no_compile: bool = False,
                 on_device_data: bool = False, nproc: int | None = None, fsdp_problem=None) -> list[Rung]:
    """The rungs for this machine, each with its settings or the reason (and doctor check) it is skipped.
    on_device_data: the config's data set can be held on the device (data_can_live_on_device); the
    device rungs before the data-on-device rung then build batches with the DataLoader, so that
    rung measures what holding the data there changes. nproc: the data-parallel rungs' processes
    (None: one per CUDA GPU here); fsdp_problem(settings) -> (why, short) | None: why the fsdp rung
    cannot train this config (no sharding plan for the model, fp16), from the trainer's own check."""
    dev = target if target in ("cuda", "mps") else accelerator(facts)
    low, low_why = low_precision(dev, facts, checks)
    fast, fast_label, fast_why = fast_path(dev, model)
    rungs: list[Rung] = []
    first = {"precision": "fp32", **({"on_device": False} if on_device_data else {})}
    state = {"cpu": {"precision": "fp32"}, "device": first}
    dev_usable = target == dev and checks.get(dev) is not None and checks[dev].status == "pass"
    gpus = cuda_devices(facts)
    nproc = gpus if nproc is None else nproc
    for row in LADDER:
        if row.get("target_only") and row["target_only"] != target:
            continue
        if (row.get("needs") == "fast" and fast_why) or (row.get("needs") == "on_device" and not on_device_data):
            continue  # a rung that does not apply to this model or data set is not listed
        name = row["name"].format(dev=dev, low=low or "bf16", fast=fast_label)
        device = "cpu" if row["on"] == "cpu" else dev
        adds = dict(row.get("adds", {}))
        if adds.get("precision") == "low":
            adds["precision"] = low
        if row.get("needs") == "fast":
            adds = dict(fast)
        if row.get("needs") == "multi":  # a rung skipped for want of GPUs still says what it would run: 2 at least
            adds["nproc"] = max(nproc, 2)
        rung = Rung(name, device, {**state[row["on"]], **adds}, baseline=bool(row.get("baseline")), adds=adds,
                    changes=describe(adds, device, bool(row.get("baseline"))))
        need = (row.get("needs") or "").format(dev=dev)
        if row["on"] == "device" and not dev_usable:
            c = checks.get(dev)
            rung.skip, rung.check, rung.short = (c.message if c else f"no {dev} here"), dev, f"no usable {dev} here"
            if target != dev and c is not None and c.status == "pass":
                rung.skip = rung.short = f"--device {target} was chosen"
        elif need == "bf16" and low is None:
            rung.skip, rung.check, rung.short = low_why, "bf16", f"no bf16 or fp16 on {dev}"
        elif need == "cudagraphs" and dev != "cuda":
            rung.skip = f"training.compile_mode reduce-overhead captures CUDA graphs: {dev} has none"
            rung.short = "CUDA graphs are CUDA only"
        elif need in ("compile", "cudagraphs") and no_compile:
            rung.skip = rung.short = "--no-compile"
        elif need in ("compile", "cudagraphs") and checks.get("compile") is not None and checks["compile"].status != "pass":
            rung.skip, rung.check, rung.short = checks["compile"].message, "compile", "torch.compile unavailable"
        elif need == "multi" and (why := multi_skip(dev, nproc, gpus)):
            rung.skip, rung.short = why
        elif need == "multi" and adds["parallel"] == "fsdp" and fsdp_problem and fsdp_problem(rung.settings):
            rung.skip, rung.short = fsdp_problem(rung.settings)
        if rung.skip is None:
            state[row["on"]] = dict(rung.settings)
        rungs.append(rung)
    return rungs


def carry_forward(rungs: list[Rung], index: int, ok: bool) -> list[str]:
    """After rung `index` ran (ok or not): a failed or skipped rung's addition is taken out of the
    later rungs on its device. Returns notes for the rungs that lost it."""
    notes = []
    r = rungs[index]
    if ok or not r.adds:
        return notes
    for later in rungs[index + 1:]:
        if later.device != r.device or later.skip:  # a rung that will not run needs no note
            continue
        for key in r.adds:
            if key in later.settings and key not in later.adds:
                later.settings[key] = PLAIN.get(key, False)
                notes.append(f"{later.name}: without {key} ({r.name} did not pass)")
    return notes


def judge(result, baseline) -> None:
    """Speed-up over the baseline, and a flag when the loss departs beyond LOSS_TOLERANCE."""
    if result.status != "ok" or baseline is None or baseline.status != "ok":
        return
    if baseline.per_second and result.per_second:
        result.speedup = result.per_second / baseline.per_second
    if result is baseline or baseline.loss is None:
        return
    loss, ref = result.loss, baseline.loss
    if loss is None or not math.isfinite(loss):
        result.status, result.reason = "flagged", f"loss is {loss} (baseline {ref:.4f})"
        return
    rel = abs(loss - ref) / max(abs(ref), 1e-8)
    if rel > LOSS_TOLERANCE:
        result.status = "flagged"
        result.reason = (result.reason + "; " if result.reason else "") + (
            f"loss {loss:.4f} vs {ref:.4f} on the baseline after the same steps: {100 * rel:.0f}% apart "
            f"(tolerance {100 * LOSS_TOLERANCE:.0f}%): faster, but not the same training")
