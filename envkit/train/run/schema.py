"""train.yaml's schema: every section, key, type, default, range and one line of help, and which
keys apply to which built-in model and dataset. Data, not logic: `config.py` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AUTO = "auto"


@dataclass(frozen=True)
class Field:
    kind: str  # int | int_auto (auto|int) | float | str | name (a folder name) | bool | list | dict | compile (auto|bool)
    default: Any = None
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None
    gt: float | None = None  # strictly greater than
    help: str = ""
    nullable: bool = False


F = Field
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda", "mps")
TRACKERS = ("tensorboard", "wandb")

SCHEMA: dict[str, dict[str, Field]] = {
    "experiment": {
        "name": F("name", "experiment", help="runs/<name>/<run-id>/ (one folder name: not '.', '..', empty or holding '/')"),
        "output_dir": F("str", "runs", help="folder holding <name>/<run-id>/"),
        "seed": F("int", 1337, min=0, help="seeds python, torch (all devices) and the data order"),
        "tags": F("list", [], help="free-form labels, kept in the run's config.yaml and config.json"),
        "notes": F("str", "", help="free-form text, kept in the run's config.yaml and config.json"),
    },
    "dataset": {
        "type": F("str", "synthetic", help="synthetic | text | npz | tokens | cifar10 | cifar100 | imagefolder | package.module:factory"),
        "task": F("str", "arithmetic", help="synthetic task: arithmetic (gpt) | teacher (mlp) | images (cnn)"),
        "path": F("str", None, nullable=True, help="text file or folder (text), .npz file (npz), folder of train.bin/val.bin (tokens), "
                                                   "cifar-10-batches-bin/ or cifar-100-binary/ (cifar), train/ and val/ class folders (imagefolder)"),
        "labels": F("str", "fine", choices=("fine", "coarse"), help="cifar100: the 100 fine or the 20 coarse classes"),
        "on_device": F("compile", AUTO,
                       help="cifar/npz/synthetic teacher: hold the training and validation sets on the training device and build "
                            "each batch there (gather, crop, flip, normalise as batched tensor operations; no DataLoader workers). "
                            "auto: where the sets fit in a quarter of the device's free memory"),
        "augment": F("bool", True, help="training images: random crop (padding 4) and horizontal flip (cifar), random resized crop and flip (imagefolder)"),
        "label_noise": F("float", 0.0, min=0, max=1, help="cifar/imagefolder: fraction of training labels flipped to another class (seeded)"),
        "on_bad_file": F("str", "stop", choices=("stop", "skip"),
                         help="imagefolder: an image file that does not decode (truncated, corrupt). stop: the run ends with one "
                              "line naming the file; skip: the next readable image takes its place, and train.log and "
                              "summary.json (skipped_files) give the count and the first paths"),
        "dtype": F("str", "uint16", choices=("uint16", "uint32"), help="tokens: the .bin files' integer type (uint32 above 65,535 tokens)"),
        "vocab_size": F("int", None, nullable=True, min=2, help="tokens: vocabulary size (default: DIR/meta.json's vocab_size)"),
        "level": F("str", "char", choices=("char", "byte"), help="text tokenisation"),
        "val_fraction": F("float", 0.1, gt=0, max=0.5, help="share of the examples held out for validation (synthetic, text, npz)"),
        "num_samples": F("int", 20000, min=16, help="synthetic: training examples (teacher/images) or problems (arithmetic)"),
        "num_classes": F("int", 10, min=2, help="teacher/images task: classes"),
        "input_dim": F("int", 32, min=1, help="teacher task: input features"),
        "image_size": F("int", 32, min=8, help="images task: side in pixels"),
        "noise": F("float", 0.5, min=0, help="images/teacher task: noise level"),
        "digits": F("int", 2, min=1, max=6, help="arithmetic task: digits per operand"),
        "kwargs": F("dict", {}, help="arguments for a package.module:factory dataset"),
    },
    "model": {
        "type": F("str", "gpt", help="gpt | mlp | cnn | resnet18 | resnet34 | resnet50 | package.module:factory"),
        "stem": F("str", "cifar", choices=("cifar", "imagenet"), help="resnet: cifar (3x3 conv, no max-pool) | imagenet (7x7/2 conv + max-pool)"),
        "n_layer": F("int", 4, min=1, help="gpt: transformer blocks"),
        "n_head": F("int", 4, min=1, help="gpt: attention heads per block (n_embd must be divisible by it)"),
        "n_embd": F("int", 128, min=8, help="gpt: embedding width"),
        "block_size": F("int", 64, min=4, help="context length in tokens"),
        "dropout": F("float", 0.0, min=0, max=0.9, help="gpt/mlp: dropout probability"),
        "bias": F("bool", False, help="gpt: biases in the Linear and LayerNorm layers"),
        "hidden": F("int", 256, min=1, help="mlp: hidden width"),
        "depth": F("int", 2, min=1, help="mlp: hidden layers"),
        "width": F("int", 32, min=4, help="cnn: channels of the first stage; resnet: of the stem (default 64, the published model)"),
        "blocks": F("int", 1, min=1, help="cnn: residual blocks per stage (3 stages)"),
        "channels_last": F("compile", AUTO, help="cnn/resnet: memory format (auto: on CUDA, MPS and the CPU)"),
        "kwargs": F("dict", {}, help="arguments for a package.module:factory model"),
    },
    "training": {
        "max_steps": F("int", 1000, min=1, help="optimizer steps (ignored when epochs is set)"),
        "epochs": F("int", None, nullable=True, min=1, help="passes over the training set; sets max_steps from the data size"),
        "batch_size": F("int_auto", 32, min=1, help="per micro-step, per process; auto: the largest power of two whose memory, "
                                                   "measured by probing one step, fits in memory_fraction of the device"),
        "memory_fraction": F("float", 0.8, gt=0, max=1, help="batch_size auto: the share of the device's memory the run may plan for"),
        "batch_size_max": F("int", 1024, min=1, help="batch_size auto: never above this"),
        "grad_accum": F("int", 1, min=1, help="micro-steps per optimizer step"),
        "lr": F("float", 3e-4, gt=0, help="peak learning rate"),
        "min_lr": F("float", None, nullable=True, min=0, help="end of the cosine (default lr/10)"),
        "schedule": F("str", "cosine", choices=("cosine", "constant"), help="after the warm-up: cosine from lr to min_lr, or constant lr"),
        "warmup_steps": F("int", 0, min=0, help="steps of linear warm-up to lr"),
        "optimizer": F("str", "adamw", choices=("adamw", "adam", "sgd", "lion"), help="lion: lr 3-10x below AdamW's (train/run/lion.py)"),
        "weight_decay": F("float", 0.1, min=0, help="applied to parameters of 2 or more dimensions only (decoupled for adamw, lion)"),
        "beta1": F("float", 0.9, min=0, max=1, help="adamw/adam/lion: first-moment decay"),
        "beta2": F("float", 0.95, min=0, max=1, help="adamw/adam; lion's default is 0.99 unless set"),
        "momentum": F("float", 0.9, min=0, max=1, help="SGD"),
        "nesterov": F("bool", False, help="SGD: Nesterov momentum"),
        "grad_clip": F("float", 1.0, min=0, help="max grad norm; 0 = off"),
        "precision": F("str", AUTO, choices=PRECISIONS, help="autocast dtype; auto: bf16 on CUDA with bf16, else fp32"),
        "compile": F("compile", AUTO, help="torch.compile: auto (CUDA only) | true | false"),
        "compile_mode": F("str", "default", choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                          help="torch.compile mode (reduce-overhead: CUDA graphs; max-autotune: minutes of tuning)"),
        "sdpa_backend": F("str", AUTO, choices=("auto", "flash", "efficient", "cudnn", "math"),
                          help="CUDA attention kernel for scaled_dot_product_attention; auto: PyTorch's choice"),
        "parallel": F("str", AUTO, choices=("auto", "ddp", "fsdp"),
                      help="several processes: ddp replicates the model on each; fsdp shards weights, gradients and optimizer "
                           "state over them (FSDP2); auto: ddp while they fit one device with headroom, else fsdp"),
        "activation_checkpointing": F("str", "none", choices=("none", "full"),
                                      help="full: each block (GPT) or stage (ResNet) recomputes its activations in the backward: "
                                           "less memory, about a third more compute"),
        "ddp_bucket_mb": F("float", 25.0, gt=0, help="several processes: DDP's gradient bucket size in MB (torch's default 25; profiles may set it)"),
        "ddp_comm_dtype": F("str", "fp32", choices=("fp32", "bf16"),
                            help="several processes on CUDA: dtype of the gradient all-reduce (bf16: half the bytes)"),
        "empty_cache_every": F("int", 0, min=0, help="MPS/CUDA: empty_cache() every N steps; 0 = never"),
        "nan_policy": F("str", "rollback", choices=("rollback", "stop"),
                        help="non-finite loss: roll back to the last good checkpoint with a lower lr, or stop"),
        "nan_lr_factor": F("float", 0.5, gt=0, max=1, help="nan_policy rollback: the learning rate is multiplied by this at each rollback"),
        "max_rollbacks": F("int", 3, min=0, help="nan_policy rollback: rollbacks before the run stops"),
    },
    "eval": {
        "every_steps": F("int", 100, min=0, help="0 = only at the end"),
        "batches": F("int", 20, min=1, help="validation batches per eval"),
        "accuracy_samples": F("int", 256, min=0, help="arithmetic: problems scored by exact match"),
    },
    "checkpoint": {
        "every_steps": F("int", 200, min=0, help="0 = only at the end"),
        "keep_last": F("int", 3, min=1, help="checkpoints kept (the newest that verify); older ones are deleted"),
    },
    "logging": {
        "every_steps": F("int", 10, min=1, help="metrics.jsonl and progress cadence"),
        "heartbeat_seconds": F("float", 5.0, gt=0, help="seconds between writes of heartbeat.json"),
        "progress": F("str", AUTO, choices=("auto", "rich", "plain", "none"),
                     help="progress display; auto: a rich bar on a terminal, plain lines otherwise"),
        "device_seconds": F("float", 3.0, min=0, help="seconds between device samples (utilization, memory, power); 0 = off"),
        "trackers": F("list", [], choices=TRACKERS, help="also write metrics through: tensorboard, wandb (metrics.jsonl stays)"),
    },
    "device": {
        "type": F("str", AUTO, choices=DEVICES, help="device to train on; auto: the profile's, else cuda, then mps, then cpu"),
        "fallback_to_cpu": F("bool", False, help="train on the CPU when the device is unusable at run time (reported)"),
        "fallback": F("str", AUTO, choices=("auto", "cpu", "mps-fallback", "none"),
                      help="after a device fault mid-run, restart from the last checkpoint: mps-fallback (missing MPS "
                           "operators on the CPU), cpu (the whole run), none (stop); auto: mps-fallback for a missing operator"),
    },
    "dataloader": {
        "num_workers": F("int", 0, min=0, help="DataLoader worker processes; 0: batches are loaded in the training process"),
        "pin_memory": F("compile", AUTO, help="auto: on CUDA only"),
        "persistent_workers": F("bool", False, help="keep DataLoader workers alive between epochs (needs num_workers > 0)"),
        "prefetch_factor": F("int", None, nullable=True, min=1, help="batches each worker loads ahead (needs num_workers > 0); null: torch's default"),
        "fetch_ahead": F("compile", AUTO, help="read and copy the next batch while the GPU computes; auto: on CUDA/MPS "
                                              "with workers or a built-in dataset (train/prefetch.py)"),
    },
    "sweep": {
        "grid": F("dict", {}, help="`envkit sweep`: section.key -> list of values (or any other name -> list of mappings of keys "
                                   "set together); every combination is a run"),
    },
}

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
# Sections that do not change the trajectory: excluded from the config hash checked on resume.
HASH_EXCLUDED = {"logging", "checkpoint", "sweep"}
HASH_EXCLUDED_KEYS = {"experiment.name", "experiment.output_dir", "experiment.tags", "experiment.notes",
                      "eval.batches", "eval.accuracy_samples", "device.fallback_to_cpu", "device.fallback", "dataloader.num_workers",
                      "training.compile_mode", "training.sdpa_backend", "training.ddp_bucket_mb",  # speed only: same computation
                      "training.parallel", "training.activation_checkpointing",  # the same steps, spread or recomputed
                      "training.memory_fraction", "training.batch_size_max",  # only how batch_size auto is decided
                      "dataloader.pin_memory", "dataloader.persistent_workers", "dataloader.prefetch_factor",
                      "dataloader.fetch_ahead",
                      "dataset.on_device",  # the same batches, built on the device: a run may resume with it switched
                      # stop ends a run at the first bad file, so whatever it trained is what skip trains up to there:
                      # a run stopped by one resumes with skip (the fix its error line gives)
                      "dataset.on_bad_file"}
