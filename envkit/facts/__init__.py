"""Facts: what the machine is. `gather()` is the entry point for commands."""

from __future__ import annotations

from envkit.facts.collect import collect, machine_label
from envkit.facts.model import ChipInfo, Facts, GPUInfo, OSInfo, PythonInfo, TorchInfo
from envkit.facts.runner import LiveRunner, RecordingRunner, ReplayRunner, Runner, load_snapshot

__all__ = ["Facts", "ChipInfo", "GPUInfo", "OSInfo", "PythonInfo", "TorchInfo", "Runner", "LiveRunner",
           "RecordingRunner", "ReplayRunner", "collect", "gather", "machine_label", "load_snapshot"]


def gather(replay: str | None = None, *, runtime: bool = True, gpu_detail: bool = True,
           python: str | None = None) -> Facts:
    """Facts of this machine, or of a recorded snapshot when `replay` is a path."""
    if replay:
        snap = load_snapshot(replay)
        return collect(ReplayRunner(snap, source=str(replay)), runtime=runtime, gpu_detail=gpu_detail, source=str(replay))
    return collect(LiveRunner(python), runtime=runtime, gpu_detail=gpu_detail)
