"""The speed switches a run applies before its first step: torch settings (TF32, matmul
precision: the profile's, else the defaults fast trainers use on CUDA), the attention backend, and
torch.compile with an eager fallback when compiling fails."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch

from envkit.config.schema import CompileMode, CompileScope, CompileScoped, SdpaBackend
from envkit.profiles.torch_settings import apply_torch_settings as apply_profile

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
SDPA_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")


# what want_compile answers: training.compile decided on the device (an off answer is summary.json's compile note)
Compiling = Literal["on", "off", "off (auto: CUDA only)"]

# torch.compile's modes that capture CUDA graphs, and what each becomes where graphs cannot hold
WITHOUT_CUDA_GRAPHS: dict[CompileMode, CompileMode] = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}


def compile_kwargs(mode: CompileMode | None) -> dict:
    return {} if mode in (None, "default") else {"mode": mode}


def compile_mode_for(mode: CompileMode, world: int, between_graphs: bool = True) -> tuple[CompileMode, str | None]:
    """(the mode this run compiles with, a line when it is not the one asked for). Several processes
    train without CUDA graphs where they communicate between the compiled graphs (`between_graphs`):
    DDP's bucket hooks and FSDP's per-unit gathers run there, and a replayed graph would not wait for
    them (a profile's reduce-overhead is measured on one GPU). training.ddp_reduce after_backward
    communicates after the step's graphs, and keeps them."""
    if world > 1 and between_graphs and mode in WITHOUT_CUDA_GRAPHS:
        other = WITHOUT_CUDA_GRAPHS[mode]
        return other, (f"training.compile_mode {mode}: no CUDA graphs with {world} processes (DDP's and FSDP's "
                       f"communication runs between the graphs); compiling with mode {other}")
    return mode, None


def apply_torch_settings(settings: dict | None, device_type: TrainDevice) -> list[str]:
    if settings:
        try:
            return list(apply_profile(settings, device_type) or [])
        except ImportError:
            pass
    if device_type == "cuda":  # the defaults fast trainers use: TF32 matmuls and convolutions
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    return []


def apply_sdpa_backend(name: SdpaBackend, device_type: TrainDevice) -> list[str]:
    """Restrict scaled_dot_product_attention to one backend (plus math as the fallback that always
    works); "auto" leaves PyTorch's own choice. Global switches, so compiled graphs see them too."""
    if name in (None, "auto"):
        return []
    if device_type != "cuda":
        return [f"training.sdpa_backend {name} ignored on {device_type}: the backends are CUDA kernels"]
    b = torch.backends.cuda
    switches = {"flash": "enable_flash_sdp", "efficient": "enable_mem_efficient_sdp", "cudnn": "enable_cudnn_sdp"}
    for backend, fn in switches.items():
        if hasattr(b, fn):
            getattr(b, fn)(backend == name)
    b.enable_math_sdp(True)
    if name != "math" and not hasattr(b, switches[name]):
        return [f"training.sdpa_backend {name}: this torch has no such backend; PyTorch chooses"]
    return [f"attention (SDPA) backend: {name}" + (" (math as fallback)" if name != "math" else "")]


def want_compile(setting, device_type: TrainDevice) -> Compiling:
    if setting is True:
        return "on"
    if setting is False:
        return "off"
    return "on" if device_type == "cuda" else "off (auto: CUDA only)"


def maybe_compile(module, note: Compiling, log, mode: CompileMode = "default"):
    """(the module to train, what summary.json says of compile)."""
    if note != "on":
        return module, note
    try:
        compiled = torch.compile(module, **compile_kwargs(mode))
    except Exception as exc:  # noqa: BLE001 - compile is an optimisation: fall back, say so
        log(f"warning: torch.compile failed ({type(exc).__name__}: {exc}); training eager")
        return module, f"failed, eager ({type(exc).__name__})"
    return FallbackOnFirstCall(compiled, module, log), "on" if mode in (None, "default") else f"on ({mode})"


def compile_scope_for(setting: CompileScope, blockwise: bool, world: int, mode: CompileMode, model_type: str) -> tuple[CompileScoped, str | None]:
    """(model | blocks, a line when blocks was asked for and cannot be). auto: blocks where the
    model repeats a block (a fraction of the compile time: GPT-2 small's 12 blocks compile as one),
    in one process without CUDA graphs; several processes (DDP wraps the compiled module) and CUDA
    graphs keep the whole-step graph they were measured with (profiles/cuda-hopper.toml)."""
    if setting == "model":
        return "model", None
    if not blockwise:
        why = (f"training.compile_scope blocks: model.type {model_type} is not embed -> repeated blocks -> head; "
               "compiled whole") if setting == "blocks" else None
        return "model", why
    if setting == "blocks" or (world == 1 and mode not in WITHOUT_CUDA_GRAPHS):
        return "blocks", None
    return "model", None


def blocks_share_a_compile() -> bool:
    """Dynamo reuses one block's compile for the others only where it inlines modules with their
    parameters as graph inputs (torch >= 2.5's default); before, each block compiles again, and past
    its cache limit (8) the rest would run eager."""
    try:
        import warnings

        import torch._dynamo

        with warnings.catch_warnings():  # torch 2.13 deprecates the flag (always on) with a FutureWarning a user would see
            warnings.simplefilter("ignore", FutureWarning)
            return bool(getattr(torch._dynamo.config, "inline_inbuilt_nn_modules", False))
    except Exception:  # noqa: BLE001 - a torch without Dynamo: no regional compile
        return False


def eager_stance(compiled: bool = True):
    """A context in which compiled modules run eager (torch >= 2.6's set_stance), else nothing (and
    nothing at all in a run that compiled nothing: set_stance loads torch._dynamo)."""
    import contextlib

    set_stance = getattr(torch.compiler, "set_stance", None) if compiled else None
    return set_stance("force_eager") if set_stance is not None else contextlib.nullcontext()


def compile_blocks(module, note: Compiling, log, mode: CompileMode = "default"):
    """(the module to train, what summary.json says of compile) for compile_scope blocks: each block
    compiled in place with the same options, so Dynamo compiles the first and reuses it for the rest
    (parameters are graph inputs: torch.compiler docs, regional compilation), and the head with the
    loss as one more graph (step.BlockwiseLoss)."""
    if note != "on":
        return module, note
    blocks = list(module.model.blocks)
    try:
        for block in blocks:
            block.compile(**compile_kwargs(mode))
        module.head_loss = torch.compile(module.head_loss, **compile_kwargs(mode))
    except Exception as exc:  # noqa: BLE001 - compile is an optimisation: fall back, say so
        _uncompile(module)
        log(f"warning: torch.compile failed ({type(exc).__name__}: {exc}); training eager")
        return module, f"failed, eager ({type(exc).__name__})"
    on = "on" if mode in (None, "default") else f"on ({mode})"
    return (FallbackOnFirstCall(module, module, log, undo=lambda: _uncompile(module)),
            f"{on}, per block ({len(blocks)} blocks, one compile) and the head with the loss")


def _uncompile(module) -> None:
    from envkit.train.run.step import head_loss

    for block in module.model.blocks:
        block._compiled_call_impl = None  # what nn.Module.compile set: its call runs eager again
    module.head_loss = head_loss


class FallbackOnFirstCall(torch.nn.Module):
    """torch.compile compiles lazily: if the first forward fails, run eager from then on (reported)."""

    def __init__(self, compiled, eager, log, undo=None):
        super().__init__()
        self.compiled, self._eager, self._log, self._checked, self._undo = compiled, [eager], log, False, undo

    def forward(self, *args, **kwargs):
        if self._checked:
            return self.compiled(*args, **kwargs)
        try:
            out = self.compiled(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - compile is an optimisation: fall back to eager, say so
            first = (str(exc).splitlines() or [""])[0][:200]  # an AssertionError may have no message at all
            self._log(f"warning: torch.compile failed at the first step ({type(exc).__name__}{': ' + first if first else ''}); "
                      "training eager (set training.compile: false to skip the attempt)")
            if self._undo is not None:  # compiled in place (compile_scope blocks): made eager again
                self._undo()
            self.compiled = self._eager[0]
            out = self.compiled(*args, **kwargs)
        self._checked = True
        return out
