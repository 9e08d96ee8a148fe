"""train.yaml's schema: one frozen dataclass per section (torchtitan's way), each key with its type,
default, range and one line of help as the field's metadata, and which keys apply to which built-in
model and dataset. Data, not logic: `config.py` reads it."""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Literal

from envkit.config.kinds import AUTO, AutoOrBool, Field, FolderName, IntAuto


def F(default: Any = None, **spec) -> Any:
    """One key of a section: a dataclass field whose metadata["spec"] is its Field."""
    meta = {"spec": Field(default, **spec)}
    if isinstance(default, (list, dict)):  # a fresh one per config: a list default is never shared
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


Precision = Literal["auto", "fp32", "bf16", "fp16"]
# What a run trains in once auto is decided: the trainer's (summary.json "precision"), the tuner's candidates
TrainPrecision = Literal["fp32", "bf16", "fp16"]
DeviceType = Literal["auto", "cpu", "cuda", "mps"]
Tracker = Literal["tensorboard", "wandb"]
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
CompileScope = Literal["auto", "model", "blocks"]
SdpaBackend = Literal["auto", "flash", "efficient", "cudnn", "math"]
ParallelMode = Literal["auto", "ddp", "fsdp"]
# training.parallel as a run decided it (train/run/sharding.py choose; summary.json "parallel"): single is one process
Parallel = Literal["single", "ddp", "fsdp"]
DeviceFallback = Literal["auto", "cpu", "mps-fallback", "none"]
DdpReduce = Literal["auto", "overlap", "after_backward"]
# training.ddp_reduce as a ddp run decided it (train/run/distributed.py ddp_reduce_for)
DdpReduced = Literal["overlap", "after_backward"]
# training.compile_scope as a run decided it (train/run/speed.py compile_scope_for; fsdp compiles the units it shards)
CompileScoped = Literal["model", "blocks", "fsdp units"]
DdpCommDtype = Literal["fp32", "bf16"]
NanPolicy = Literal["rollback", "stop"]
ResnetStem = Literal["cifar", "imagenet"]
TextLevel = Literal["char", "byte"]
TokenDtype = Literal["uint16", "uint32"]
CifarLabels = Literal["fine", "coarse"]
ProgressDisplay = Literal["auto", "rich", "plain", "none"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Experiment:
    name: FolderName = F("experiment", help="runs/<name>/<run-id>/ (one folder name: not '.', '..', empty or holding '/')")
    output_dir: str = F("runs", help="folder holding <name>/<run-id>/")
    seed: int = F(1337, min=0, help="seeds python, torch (all devices) and the data order")
    tags: list = F([], help="free-form labels, kept in the run's config.yaml and config.json")
    notes: str = F("", help="free-form text, kept in the run's config.yaml and config.json")


@dataclass(frozen=True, kw_only=True, slots=True)
class Dataset:
    type: str = F("synthetic", help="synthetic | text | npz | tokens | cifar10 | cifar100 | imagefolder | package.module:factory")
    task: str = F("arithmetic", help="synthetic task: arithmetic (gpt) | teacher (mlp) | images (cnn)")
    path: str | None = F(None,
                         help="text file or folder (text), .npz file (npz), folder of train.bin/val.bin (tokens), "
                              "cifar-10-batches-bin/ or cifar-100-binary/ (cifar), train/ and val/ class folders (imagefolder)")
    labels: CifarLabels = F("fine", help="cifar100: the 100 fine or the 20 coarse classes")
    on_device: AutoOrBool = F(AUTO,
                              help="cifar/npz/synthetic teacher: hold the training and validation sets on the training device and build "
                                   "each batch there (gather, crop, flip, normalise as batched tensor operations; no DataLoader workers). "
                                   "auto: where the sets fit in a quarter of the device's free memory")
    augment: bool = F(True, help="training images: random crop (padding 4) and horizontal flip (cifar), "
                                 "random resized crop and flip (imagefolder)")
    label_noise: float = F(0.0, min=0, max=1, help="cifar/imagefolder: fraction of training labels flipped to another class (seeded)")
    on_bad_file: Literal["stop", "skip"] = F("stop",
                                             help="imagefolder: an image file that does not decode (truncated, corrupt). stop: the run ends with one "
                                                  "line naming the file; skip: the next readable image takes its place, and train.log and "
                                                  "summary.json (skipped_files) give the count and the first paths")
    dtype: TokenDtype = F("uint16", help="tokens: the .bin files' integer type (uint32 above 65,535 tokens)")
    vocab_size: int | None = F(None, min=2, help="tokens: vocabulary size (default: DIR/meta.json's vocab_size)")
    level: TextLevel = F("char", help="text tokenisation")
    val_fraction: float = F(0.1, gt=0, max=0.5, help="share of the examples held out for validation (synthetic, text, npz)")
    num_samples: int = F(20000, min=16, help="synthetic: training examples (teacher/images) or problems (arithmetic)")
    num_classes: int = F(10, min=2, help="teacher/images task: classes")
    input_dim: int = F(32, min=1, help="teacher task: input features")
    image_size: int = F(32, min=8, help="images task: side in pixels")
    noise: float = F(0.5, min=0, help="images/teacher task: noise level")
    digits: int = F(2, min=1, max=6, help="arithmetic task: digits per operand")
    kwargs: dict = F({}, help="arguments for a package.module:factory dataset")


@dataclass(frozen=True, kw_only=True, slots=True)
class Model:
    type: str = F("gpt", help="gpt | mlp | cnn | resnet18 | resnet34 | resnet50 | package.module:factory")
    stem: ResnetStem = F("cifar", help="resnet: cifar (3x3 conv, no max-pool) | imagenet (7x7/2 conv + max-pool)")
    n_layer: int = F(4, min=1, help="gpt: transformer blocks")
    n_head: int = F(4, min=1, help="gpt: attention heads per block (n_embd must be divisible by it)")
    n_embd: int = F(128, min=8, help="gpt: embedding width")
    block_size: int = F(64, min=4, help="context length in tokens")
    dropout: float = F(0.0, min=0, max=0.9, help="gpt/mlp: dropout probability")
    bias: bool = F(False, help="gpt: biases in the Linear and LayerNorm layers")
    hidden: int = F(256, min=1, help="mlp: hidden width")
    depth: int = F(2, min=1, help="mlp: hidden layers")
    width: int = F(32, min=4, help="cnn: channels of the first stage; resnet: of the stem (default 64, the published model)")
    blocks: int = F(1, min=1, help="cnn: residual blocks per stage (3 stages)")
    channels_last: AutoOrBool = F(AUTO, help="cnn/resnet: memory format (auto: on CUDA, MPS and the CPU)")
    kwargs: dict = F({}, help="arguments for a package.module:factory model")


@dataclass(frozen=True, kw_only=True, slots=True)
class Training:
    max_steps: int = F(1000, min=1, help="optimizer steps (epochs, when set, decides instead: setting both is refused)")
    epochs: int | None = F(None, min=1, help="passes over the training set; sets max_steps from the data size")
    batch_size: IntAuto = F(32, min=1, help="per micro-step, per process; auto: the largest power of two whose memory, "
                                            "measured by probing one step, fits in memory_fraction of the device")
    memory_fraction: float = F(0.8, gt=0, max=1, help="batch_size auto: the share of the device's memory the run may plan for")
    batch_size_max: int = F(1024, min=1, help="batch_size auto: never above this")
    grad_accum: int = F(1, min=1, help="micro-steps per optimizer step")
    global_batch_size: int | None = F(None, min=1,
                                      help="samples per optimizer step over all processes; sets batch_size per process "
                                           "(global_batch_size / (processes x grad_accum)), so the run resumes on another "
                                           "process count with the same steps (a batch_size beside it has no effect)")
    lr: float = F(3e-4, gt=0, help="peak learning rate")
    min_lr: float | None = F(None, min=0, help="end of the cosine (default lr/10)")
    schedule: Literal["cosine", "constant"] = F("cosine", help="after the warm-up: cosine from lr to min_lr, or constant lr")
    warmup_steps: int = F(0, min=0, help="steps of linear warm-up to lr")
    optimizer: Literal["adamw", "adam", "sgd", "lion"] = F("adamw", help="lion: lr 3-10x below AdamW's (train/run/lion.py)")
    weight_decay: float = F(0.1, min=0, help="applied to parameters of 2 or more dimensions only (decoupled for adamw, lion)")
    beta1: float = F(0.9, min=0, max=1, help="adamw/adam/lion: first-moment decay")
    beta2: float = F(0.95, min=0, max=1, help="adamw/adam; lion's default is 0.99 unless set")
    momentum: float = F(0.9, min=0, max=1, help="SGD")
    nesterov: bool = F(False, help="SGD: Nesterov momentum")
    grad_clip: float = F(1.0, min=0, help="max grad norm; 0 = off")
    precision: Precision = F(AUTO, help="autocast dtype; auto: bf16 on CUDA with bf16, else fp32")
    compile: AutoOrBool = F(AUTO, help="torch.compile: auto (CUDA only) | true | false")
    compile_mode: CompileMode = F("default", help="torch.compile mode (reduce-overhead: CUDA graphs; max-autotune: minutes of tuning)")
    compile_scope: CompileScope = F(AUTO,
                                    help="what one torch.compile call covers: model (the forward and the loss, one graph) or blocks "
                                         "(each repeated block alone: compiled once, reused for all; the embedding eager, the head and "
                                         "the loss a second graph: a fraction of the compile time); auto: blocks for a model of repeated "
                                         "blocks (gpt) in one process without CUDA graphs, else model")
    compile_cache: bool = F(True,
                            help="keep what torch.compile produced in envkit's cache (compile/, one signed file per torch build, "
                                 "device and model shape; tens to hundreds of MB each) and load it on the next run: "
                                 "a second run compiles nothing; false: neither load nor save")
    deterministic: bool = F(False,
                            help="the same numbers on every run of this config on this kind of device and torch build: "
                                 "deterministic kernels only (torch.use_deterministic_algorithms), cuBLAS's fixed workspace, "
                                 "no cudnn benchmark, compile without autotuning by timing (CUDA graphs kept); an op with no deterministic "
                                 "kernel stops the run, named (docs/reproduce.md)")
    sdpa_backend: SdpaBackend = F(AUTO, help="CUDA attention kernel for scaled_dot_product_attention; auto: PyTorch's choice")
    parallel: ParallelMode = F(AUTO,
                               help="several processes: ddp replicates the model on each; fsdp shards weights, gradients and optimizer "
                                    "state over them (FSDP2); auto: ddp while they fit one device with headroom, else fsdp")
    activation_checkpointing: Literal["none", "full"] = F("none",
                                                          help="full: each block (GPT) or stage (ResNet) recomputes its activations in the backward: "
                                                               "less memory, about a third more compute")
    ddp_bucket_mb: float = F(25.0, gt=0, help="several processes: DDP's gradient bucket size in MB (torch's default 25; profiles may set it)")
    ddp_comm_dtype: DdpCommDtype = F("fp32", help="several processes on CUDA: dtype of the gradient all-reduce (bf16: half the bytes)")
    ddp_reduce: DdpReduce = F(
        "auto", help="ddp: overlap (DDP: the all-reduce overlaps the backward, no CUDA graphs) or after_backward (the step "
                     "compiled as on one GPU, CUDA graphs kept, then one bucketed all-reduce); auto: after_backward on CUDA "
                     "with a compile mode that has CUDA graphs and at most 128 MB of gradients, else overlap")
    empty_cache_every: int = F(0, min=0, help="MPS/CUDA: empty_cache() every N steps; 0 = never")
    nan_policy: NanPolicy = F("rollback", help="non-finite loss: roll back to the last good checkpoint with a lower lr, or stop")
    nan_lr_factor: float = F(0.5, gt=0, max=1, help="nan_policy rollback: the learning rate is multiplied by this at each rollback")
    max_rollbacks: int = F(3, min=0, help="nan_policy rollback: rollbacks before the run stops")


@dataclass(frozen=True, kw_only=True, slots=True)
class Eval:
    every_steps: int = F(100, min=0, help="0 = only at the end")
    batches: int = F(20, min=1, help="validation batches per eval")
    accuracy_samples: int = F(256, min=0, help="arithmetic: problems scored by exact match")


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    every_steps: int = F(200, min=0, help="0 = only at the end")
    keep_last: int = F(3, min=1, help="checkpoints kept (the newest that verify); older ones are deleted")
    sigterm_grace_seconds: float = F(10.0, gt=0,
                                     help="after SIGTERM, seconds the step under way may still take; then it is given up and "
                                          "a resume starts from the newest checkpoint (a Slurm preemption kills 30 s after its SIGTERM)")


@dataclass(frozen=True, kw_only=True, slots=True)
class Logging:
    every_steps: int = F(10, min=1, help="metrics.jsonl and progress cadence")
    heartbeat_seconds: float = F(5.0, gt=0, help="seconds between writes of heartbeat.json")
    progress: ProgressDisplay = F(AUTO, help="progress display; auto: a rich bar on a terminal, plain lines otherwise")
    device_seconds: float = F(3.0, min=0, help="seconds between device samples (utilization, memory, power); 0 = off")
    trackers: list[Tracker] = F([], help="also write metrics through: tensorboard, wandb (metrics.jsonl stays)")


@dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    type: DeviceType = F(AUTO, help="device to train on; auto: the profile's, else cuda, then mps, then cpu")
    fallback_to_cpu: bool = F(False, help="train on the CPU when the device is unusable at run time (reported)")
    fallback: DeviceFallback = F(AUTO,
                                 help="after a device fault mid-run, restart from the last checkpoint: mps-fallback (missing MPS "
                                      "operators on the CPU), cpu (the whole run), none (stop); auto: mps-fallback for a missing operator")


@dataclass(frozen=True, kw_only=True, slots=True)
class Dataloader:
    num_workers: int = F(0, min=0, help="DataLoader worker processes; 0: batches are loaded in the training process")
    pin_memory: AutoOrBool = F(AUTO, help="auto: on CUDA only")
    persistent_workers: bool = F(False, help="keep DataLoader workers alive between epochs (needs num_workers > 0)")
    prefetch_factor: int | None = F(None, min=1, help="batches each worker loads ahead (needs num_workers > 0); null: torch's default")
    fetch_ahead: AutoOrBool = F(AUTO, help="read and copy the next batch while the GPU computes; auto: on CUDA/MPS "
                                           "with workers or a built-in dataset (train/prefetch.py)")


@dataclass(frozen=True, kw_only=True, slots=True)
class Sweep:
    grid: dict = F({}, help="`envkit sweep`: section.key -> list of values (or any other name -> list of mappings of keys "
                            "set together); every combination is a run")


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainConfig:
    """A whole train.yaml, as declared (defaults < profile < YAML < --set): what the config hash covers."""

    experiment: Experiment = dataclasses.field(default_factory=Experiment)
    dataset: Dataset = dataclasses.field(default_factory=Dataset)
    model: Model = dataclasses.field(default_factory=Model)
    training: Training = dataclasses.field(default_factory=Training)
    eval: Eval = dataclasses.field(default_factory=Eval)
    checkpoint: Checkpoint = dataclasses.field(default_factory=Checkpoint)
    logging: Logging = dataclasses.field(default_factory=Logging)
    device: Device = dataclasses.field(default_factory=Device)
    dataloader: Dataloader = dataclasses.field(default_factory=Dataloader)
    sweep: Sweep = dataclasses.field(default_factory=Sweep)


SECTIONS: dict[str, type] = {"experiment": Experiment, "dataset": Dataset, "model": Model, "training": Training, "eval": Eval,
                             "checkpoint": Checkpoint, "logging": Logging, "device": Device, "dataloader": Dataloader, "sweep": Sweep}


def _keys(section: type) -> dict[str, Field]:
    """A section's keys, each Field with the kind of value its annotation says."""
    hints = typing.get_type_hints(section, include_extras=True)
    return {f.name: f.metadata["spec"].typed(hints[f.name]) for f in dataclasses.fields(section)}


# section -> key -> Field, in the order train.yaml, --print-config and the reference list them
SCHEMA: dict[str, dict[str, Field]] = {name: _keys(cls) for name, cls in SECTIONS.items()}

# Which model keys apply to which built-in model (others are an error, not silently ignored).
MODEL_KEYS = {
    "gpt": {"type", "n_layer", "n_head", "n_embd", "block_size", "dropout", "bias"},
    "mlp": {"type", "hidden", "depth", "dropout"},
    "cnn": {"type", "width", "blocks", "channels_last"},
    **{f"resnet{depth}": {"type", "stem", "width", "channels_last"} for depth in (18, 34, 50)},
}
DATASET_KEYS = {
    "synthetic": {"type", "task", "num_samples", "num_classes", "input_dim", "image_size", "noise", "digits", "val_fraction", "on_device"},
    "text": {"type", "path", "level", "val_fraction"},
    "npz": {"type", "path", "val_fraction", "on_device"},
    "tokens": {"type", "path", "dtype", "vocab_size"},
    "cifar10": {"type", "path", "augment", "label_noise", "on_device"},
    "cifar100": {"type", "path", "augment", "label_noise", "labels", "on_device"},
    "imagefolder": {"type", "path", "augment", "label_noise", "image_size", "on_bad_file"},
}
SYNTHETIC_TASKS = {"arithmetic": "gpt", "teacher": "mlp", "images": "cnn"}

# A key another key makes moot: the trainer never reads it then (optim.py, trainer.py). A value the
# user set (train.yaml or --set, other than the default) that this drops is said in one line, or
# refused where setting both can only be a mistake (the last field: the refusal's fix); nothing is
# said when the deciding key was set later (--set over the file): that later word winning is what
# the precedence promises.
# (key, deciding key, the deciding values that make key moot ("set": any but null; "number": not auto), why, fix if refused)
MOOT_WHEN = (
    ("training.max_steps", "training.epochs", "set", "epochs sets the run's length from the data",
     "drop training.max_steps, or --set training.epochs=null to train {value} steps"),
    ("training.min_lr", "training.schedule", ("constant",), "a constant schedule never decays to min_lr", None),
    ("training.momentum", "training.optimizer", ("adamw", "adam", "lion"), "only sgd uses momentum", None),
    ("training.nesterov", "training.optimizer", ("adamw", "adam", "lion"), "only sgd uses Nesterov momentum", None),
    ("training.nesterov", "training.momentum", (0.0,), "Nesterov momentum needs momentum above 0", None),
    ("training.beta1", "training.optimizer", ("sgd",), "sgd has no betas (its momentum is training.momentum)", None),
    ("training.beta2", "training.optimizer", ("sgd",), "sgd has no betas (its momentum is training.momentum)", None),
    ("training.compile_mode", "training.compile", (False,), "compile_mode is torch.compile's mode", None),
    # a note, not a refusal: `envkit reproduce` writes a run's file and --set values into one train.yaml
    ("training.batch_size", "training.global_batch_size", "set", "global_batch_size sets the batch per process from the "
     "process count", None),
    ("training.compile_scope", "training.compile", (False,), "compile_scope says what torch.compile covers", None),
    ("training.compile_cache", "training.compile", (False,), "the cache keeps what torch.compile produced", None),
    ("training.memory_fraction", "training.batch_size", "number", "only batch_size auto plans with it", None),
    ("training.batch_size_max", "training.batch_size", "number", "only batch_size auto is capped by it", None),
    ("training.nan_lr_factor", "training.nan_policy", ("stop",), "nan_policy stop never rolls back", None),
    ("training.max_rollbacks", "training.nan_policy", ("stop",), "nan_policy stop never rolls back", None),
    ("dataloader.persistent_workers", "dataloader.num_workers", (0,), "it keeps DataLoader workers, and there are none", None),
    ("dataloader.prefetch_factor", "dataloader.num_workers", (0,), "it is per DataLoader worker, and there are none", None),
)

# training/dataloader/device keys whose defaults come from the profile (profile key -> config path)
PROFILE_KEYS = {
    ("train", "device"): "device.type",
    ("train", "precision"): "training.precision",
    ("train", "compile"): "training.compile",
    ("train", "compile_mode"): "training.compile_mode",
    ("train", "sdpa_backend"): "training.sdpa_backend",
    ("train", "batch_size"): "training.batch_size",
    ("train", "memory_fraction"): "training.memory_fraction",
    ("train", "lr"): "training.lr",
    ("train", "grad_clip"): "training.grad_clip",
    ("train", "grad_accum"): "training.grad_accum",
    ("train", "empty_cache_every"): "training.empty_cache_every",
    ("train", "ddp_bucket_mb"): "training.ddp_bucket_mb",
    ("dataloader", "num_workers"): "dataloader.num_workers",
    ("dataloader", "pin_memory"): "dataloader.pin_memory",
    ("dataloader", "persistent_workers"): "dataloader.persistent_workers",
    ("dataloader", "prefetch_factor"): "dataloader.prefetch_factor",
}
# Keys added after run folders were written with the hash that leaves them out: hashed only when set,
# so a config that leaves them at None keeps the hash every earlier envkit wrote (and its runs resume).
HASHED_WHEN_SET = {"training.global_batch_size"}
# Sections that do not change the trajectory: excluded from the config hash checked on resume.
HASH_EXCLUDED = {"logging", "checkpoint", "sweep"}
HASH_EXCLUDED_KEYS = {"experiment.name", "experiment.output_dir", "experiment.tags", "experiment.notes",
                      "eval.batches", "eval.accuracy_samples", "device.fallback_to_cpu", "device.fallback", "dataloader.num_workers",
                      "training.compile_scope", "training.compile_cache",  # what one compile covers, and kept: the same steps
                      "training.compile_mode", "training.sdpa_backend", "training.ddp_bucket_mb",  # speed only: same computation
                      "training.ddp_reduce",  # where the all-reduce runs, not what it sums
                      "training.deterministic",  # which kernels compute it: the same steps (and old run folders keep their hash)
                      "training.parallel", "training.activation_checkpointing",  # the same steps, spread or recomputed
                      "training.memory_fraction", "training.batch_size_max",  # only how batch_size auto is decided
                      "dataloader.pin_memory", "dataloader.persistent_workers", "dataloader.prefetch_factor",
                      "dataloader.fetch_ahead",
                      "dataset.on_device",  # the same batches, built on the device: a run may resume with it switched
                      # stop ends a run at the first bad file, so whatever it trained is what skip trains up to there:
                      # a run stopped by one resumes with skip (the fix its error line gives)
                      "dataset.on_bad_file"}
