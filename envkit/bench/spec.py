"""What one measured run is (RunSpec: model config, device, precision, compile, batch, loader,
environment) and what it gave (RunResult). Plain dataclasses that travel to the child as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RunSpec:
    name: str
    device: str  # cpu | cuda | mps
    config: dict  # envkit.train.run.config.Config.resolved(): model, dataset, training
    precision: str = "fp32"  # fp32 | bf16 | fp16
    compile: bool = False
    fused: bool = False  # fused AdamW (CUDA)
    channels_last: bool = False  # cnn only
    batch_size: int = 32
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    empty_cache_every: int = 0
    threads: int | None = None  # torch.set_num_threads in the child (OMP_NUM_THREADS is set too)
    torch_settings: dict | None = None  # a profile's [torch] section
    env: dict[str, str] = field(default_factory=dict)  # set before the child's Python starts
    warmup: int = 3  # steps before the clock (compilation, allocator, caches)
    windows: int = 5  # timed windows; the rate is their median
    window_steps: int = 5
    seed: int = 1337

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        return cls(**data)


@dataclass
class RunResult:
    name: str
    status: str  # ok | fail | skip (flagged is decided against the baseline, see ladder.judge)
    per_second: float | None = None  # samples/s or tokens/s: the median window
    unit: str = "samples"
    peak_memory_mb: float | None = None
    loss: float | None = None  # mean loss of the last window: the same steps from the same seed
    reason: str = ""
    check: str | None = None  # the doctor check a skip comes from
    windows_s: list[float] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the child, torch import included
    speedup: float | None = None
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)
