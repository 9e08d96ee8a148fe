"""training.deterministic: the same numbers on every run of a config on one kind of device with one
torch build, as PyTorch's reproducibility notes say to get them
(https://pytorch.org/docs/stable/notes/randomness.html):

- `torch.use_deterministic_algorithms(True)`: deterministic kernels only; an op that has none
  raises a RuntimeError, which the run turns into one line naming the op (`op_error`);
- CUBLAS_WORKSPACE_CONFIG=:4096:8 in the process's environment before CUDA starts (cuBLAS picks
  its reduction split by workspace otherwise, https://docs.nvidia.com/cuda/cublas/#results-reproducibility);
- cudnn.benchmark off and cudnn.deterministic on (benchmarking picks the fastest convolution
  algorithm by timing, which may differ between runs): a profile's cudnn_benchmark gives way, said
  in one line;
- torch.compile without CUDA graphs or autotuning: Inductor's deterministic mode
  (TORCHINDUCTOR_DETERMINISTIC=1, torch/_inductor/config.py: "skips any on device benchmarking")
  and compile_mode default where reduce-overhead or max-autotune was asked for.

The seeds (python, torch on every device, the data order) are set on every run already
(trainer.py). On the CPU envkit's runs are bit-identical without this switch; it costs nothing
there but the checks."""

from __future__ import annotations

import os
import re

CUBLAS_WORKSPACE = ":4096:8"
_CUBLAS_OK = (":4096:8", ":16:8")  # the two settings cuBLAS documents as deterministic
_NOT_DETERMINISTIC_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def environ_before_cuda(cfg) -> None:
    """The variables CUDA libraries and Inductor read when they start: set in this process before
    torch touches CUDA (the child calls it right after reading its config)."""
    if not cfg.training.deterministic:
        return
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in _CUBLAS_OK:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"


def prepare(cfg, torch_settings: dict | None):
    """(cfg, torch_settings, lines): compile_mode and the profile's cudnn_benchmark made to fit a
    deterministic run, each change said in one line."""
    if not cfg.training.deterministic:
        return cfg, torch_settings, []
    lines = []
    settings = dict(torch_settings or {})
    if settings.get("cudnn_benchmark"):
        settings["cudnn_benchmark"] = False
        lines.append("training.deterministic: the profile's cudnn_benchmark gives way (off: benchmarking picks "
                     "convolution algorithms by timing, run by run)")
    mode = cfg.training.compile_mode
    if mode in _NOT_DETERMINISTIC_MODES:
        cfg = cfg.derive("training.compile_mode", "default")
        lines.append(f"training.deterministic: compile_mode {mode} -> default (no CUDA graphs, no autotuning by timing)")
    return cfg, settings or torch_settings, lines


def apply(device_type: str) -> list[str]:
    """Switch torch to deterministic kernels (after the profile's torch settings); one line saying so."""
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    import contextlib

    with contextlib.suppress(Exception):  # a torch without Inductor compiles nothing
        import torch._inductor.config as inductor  # the variable was read if Inductor was imported before

        inductor.deterministic = True
    where = {"cuda": f"; CUBLAS_WORKSPACE_CONFIG={os.environ.get('CUBLAS_WORKSPACE_CONFIG')}, cudnn.benchmark off",
             "mps": "; MPS kernels that have no deterministic form raise"}.get(device_type, "")
    return [f"training.deterministic: deterministic algorithms on ({device_type}){where}"]


_OP = re.compile(r"^(\S+) does not have a deterministic implementation")


def op_error(exc: BaseException) -> str | None:
    """The one line for torch's RuntimeError about an op without a deterministic kernel, else None."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or "deterministic" not in text or "use_deterministic_algorithms" not in text:
        return None
    m = _OP.search(text.strip())
    op = m.group(1) if m else text.strip().splitlines()[0][:120]
    return (f"envkit: error: training.deterministic: {op} has no deterministic kernel on this device, so the run cannot be "
            "deterministic (fix: set training.deterministic: false, or change the model so it does not call that op)")
