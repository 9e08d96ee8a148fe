"""The shape of a profile: sections, typed settings, and how a value is checked and shown."""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from envkit.errors import EnvkitError

Section = Literal["env", "torch", "dataloader", "train", "requires"]
SECTIONS: tuple[Section, ...] = ("env", "torch", "dataloader", "train", "requires")
TOP_KEYS = ("name", "description", "extends", *SECTIONS)
SETTING_KEYS = ("value", "reason", "source", "gate", "otherwise")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REQUIRE_KEYS = ("macos", "torch", "python", "compute_capability")

NULLABLE = object()


@dataclass(frozen=True)
class Field:
    kind: type | tuple  # int, float, bool, or a tuple of allowed values
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    auto: bool = False  # "auto" is allowed too (decided when the run starts)


# The typed sections: every profile has all of these after inheritance (base defines them).
SCHEMA: dict[str, dict[str, Field]] = {
    "torch": {
        "matmul_precision": Field(("highest", "high", "medium")),
        "allow_tf32": Field(bool),
        "cudnn_benchmark": Field(bool),
    },
    "dataloader": {
        "num_workers": Field(int, minimum=0),
        "pin_memory": Field(bool),
        "persistent_workers": Field(bool),
        "prefetch_factor": Field(int, nullable=True, minimum=1),
    },
    "train": {
        "device": Field(("auto", "mps", "cuda", "cpu")),
        "precision": Field(("auto", "fp32", "bf16", "fp16")),
        "compile": Field(("auto", True, False)),
        "compile_mode": Field(("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")),
        "sdpa_backend": Field(("auto", "flash", "efficient", "cudnn", "math")),
        "batch_size": Field(int, minimum=1, auto=True),
        "memory_fraction": Field(float, minimum=0.05, maximum=1.0),
        "lr": Field(float, minimum=0),
        "grad_clip": Field(float, minimum=0),
        "grad_accum": Field(int, minimum=1),
        "empty_cache_every": Field(int, minimum=0),
        "ddp_bucket_mb": Field(float, minimum=0.001),
    },
}

# Used when a fact is unknown (a garbled snapshot, an odd machine); the profile says so in a warning.
FACT_FALLBACKS = {"perf_cores": 4, "efficiency_cores": 0, "cores": 4, "gpu_cores": 8, "memory_gb": 8,
                  "gpu_memory_gb": 16, "gpu_count": 0}


def did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def coerce_setting(section: str, key: str, value: Any, where: str) -> Any:
    spec = SCHEMA[section][key]
    if spec.nullable and (value is None or (isinstance(value, str) and value.lower() in ("none", "null", ""))):
        return None
    if spec.auto and isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(spec.kind, tuple):
        if isinstance(value, str) and True in spec.kind and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not any(value == v and type(value) is type(v) for v in spec.kind):
            allowed = ", ".join(show_plain(v) if isinstance(v, bool) else f'"{v}"' for v in spec.kind)
            raise EnvkitError(f"{show_plain(value)} is not one of {allowed}", where=where)
        return value
    if spec.kind is bool:
        if isinstance(value, bool):
            return value
        raise EnvkitError(f"{value!r} is not true or false", where=where)
    if isinstance(value, bool):
        raise EnvkitError(f"{value!r} is not a number", where=where)
    if isinstance(value, str):
        try:
            value = float(value) if spec.kind is float else int(value)
        except ValueError:
            raise EnvkitError(f"{value!r} is not a number", where=where)
    if spec.kind is int:
        if isinstance(value, float):
            if not value.is_integer():
                value = math.floor(value)
            value = int(value)
        if not isinstance(value, int):
            raise EnvkitError(f"{value!r} is not an integer", where=where)
    else:
        if not isinstance(value, (int, float)):
            raise EnvkitError(f"{value!r} is not a number", where=where)
        value = float(value)
    if spec.minimum is not None and value < spec.minimum:
        raise EnvkitError(f"{value} is below the minimum {spec.minimum:g}", where=where)
    if spec.maximum is not None and value > spec.maximum:
        raise EnvkitError(f"{value} is above the maximum {spec.maximum:g}", where=where)
    return value


def show_plain(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def show_value(v: Any) -> str:
    """A value as TOML would write it, for tables and diffs."""
    if isinstance(v, str):
        return f'"{v}"'
    return show_plain(v)
