"""What one measured run is (RunSpec: model config, device, precision, compile, batch, loader,
environment) and what it gave (RunResult). Plain dataclasses that travel to the child as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Literal

from envkit.config.schema import CompileMode, ParallelMode, Precision

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice
    from envkit.train.run.state import RateUnit

# What a measured run's child says of it (bench/child.py): it trained and was timed, or not
RanStatus = Literal["ok", "fail"]
# ... and what the parent makes of it: skip (not run), flagged (ok, but its loss departs from the baseline's: ladder.judge)
ResultStatus = RanStatus | Literal["skip", "flagged"]
# how a run that failed ended, where the parent tells: killed at its time limit, or out of memory (the child says oom)
RunNote = Literal["", "timeout", "oom"]


def rate_unit(value) -> RateUnit:
    """The unit of a rate read back from a child (its result and progress lines, a stage's rate file): tokens,
    else samples, as when it says none."""
    return "tokens" if value == "tokens" else "samples"


@dataclass
class RunSpec:
    name: str
    device: TrainDevice
    config: dict  # envkit.config.config.Config.resolved(): model, dataset, training
    precision: Precision = "fp32"  # training.precision: a rung's or candidate's; a sweep run's own (--pack auto) may be auto
    compile: bool = False
    compile_mode: CompileMode | None = None  # training.compile_mode; None: the config's own (reduce-overhead: CUDA graphs)
    on_device: bool | None = None  # dataset.on_device; None: the config's own (auto)
    channels_last: bool = False  # cnn only
    batch_size: int = 32  # the micro-batch
    grad_accum: int = 1
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    empty_cache_every: int = 0
    threads: int | None = None  # torch.set_num_threads in the child (OMP_NUM_THREADS is set too)
    torch_settings: dict | None = None  # a profile's [torch] section
    env: dict[str, str] = field(default_factory=dict)  # set before the child's Python starts
    warmup_steps: int = 3  # steps before the clock (compilation, allocator, caches)
    seconds: float = 6.0  # measured after the warm-up, in `windows` windows; the rate is their median
    windows: int = 3
    max_steps: int | None = None  # a cap on the timed steps (the CPU baseline: a few steps, said so)
    split_oom: bool = True  # the trainer splits a micro-batch that does not fit (False: report it, stop)
    seed: int = 1337
    # the data-parallel rungs: processes started by torchrun (one per GPU), and training.parallel
    # (ddp | fsdp; None: the config's own, one process)
    nproc: int = 1
    parallel: ParallelMode | None = None
    # sweep --pack auto: the folder where runs started together are timed in stages (bench/stages.py),
    # and this run's place among them
    stages: str | None = None
    stage_index: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        return cls(**data)


@dataclass
class RunResult:
    name: str
    status: ResultStatus
    per_second: float | None = None  # samples/s or tokens/s: the median window
    unit: RateUnit = "samples"
    peak_memory_mb: float | None = None
    loss: float | None = None  # the loss of step 2: the same steps from the same seed (bench/child.py LOSS_STEP)
    reason: str = ""  # in full: --json and the saved report
    check: str | None = None  # the doctor check a skip comes from
    short: str = ""  # a skip's reason in a few words: its one line on the terminal
    steps: int = 0  # timed steps
    micro_batch: int | None = None  # what it ran at (smaller than asked when the asked one did not fit)
    grad_accum: int | None = None
    did_not_fit: list[dict] = field(default_factory=list)  # [{micro_batch, asked: "20.00 GiB" | None}]
    seconds: float = 0.0  # wall time of the child, torch import included
    speedup: float | None = None
    note: RunNote = ""
    changed: str = ""  # what this rung changed over the rung before it on its device (config keys)
    rss_peak_mb: float | None = None  # the child process's peak resident memory (torch included)
    device_free_mb: float | None = None  # what the device had free when the child started (CPU: RAM available)
    device_used_mb: float | None = None  # CUDA: how much less was free at the end (context and cache included)
    world: int = 1  # processes it trained with; per_second is over all of them (the global batch / window time)
    timed_s: float | None = None  # rank 0's timed windows, summed: per_second x timed_s is what they trained, at one window
    scaling: float | None = None  # several processes: per_second over the best single-device rung's
    scaling_over: str | None = None  # ... that rung's name
    efficiency: float | None = None  # scaling / world: 1.0 when each GPU keeps its single-GPU rate

    def to_dict(self) -> dict:
        return asdict(self)
