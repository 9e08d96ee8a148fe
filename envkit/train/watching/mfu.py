"""Model FLOPs utilisation: FLOPs per token (models.GPT.flops_per_token) x tokens/s over the
device's peak from envkit/data/peaks.toml, matched by device name. Unknown devices: None (n/a)."""

from __future__ import annotations

import re
from functools import lru_cache

from envkit.resources import data_file, load_toml


@lru_cache(maxsize=1)
def peaks() -> list[dict]:
    return load_toml(data_file("peaks.toml"))["peak"]


def peak_flops(device_name: str | None) -> tuple[float, str] | None:
    """(peak bf16 FLOP/s, table name) for a device name such as "NVIDIA H100 80GB HBM3"."""
    if not device_name:
        return None
    for row in peaks():
        if all(re.search(r"(?<![A-Za-z0-9])" + re.escape(w) + r"(?![A-Za-z0-9])", device_name, re.I) for w in row["match"]):
            return float(row["bf16_flops"]), row["name"]
    return None


def mfu(flops_per_token: float | None, tokens_per_second: float | None, device_name: str | None, world: int = 1) -> float | None:
    """Fraction of the peak, or None where the FLOPs or the peak are unknown."""
    peak = peak_flops(device_name)
    if not peak or not flops_per_token or not tokens_per_second:
        return None
    return flops_per_token * tokens_per_second / (peak[0] * world)
