"""Apply a profile's [torch] section inside the process that trains. The only module of the
profile machinery that imports torch, and only when called."""

from __future__ import annotations


def apply_torch_settings(settings: dict, device: str) -> list[str]:
    """Set float32 matmul precision, TF32 (CUDA only) and cudnn.benchmark (CUDA only) from a
    profile's `torch` dict; return one human line per thing set or deliberately skipped.

    There is no TF32 switch for MPS (`torch.backends.mps.allow_tf32` does not exist,
    docs/knowledge/mps.md), so `allow_tf32` on another device is reported, not faked."""
    import torch

    messages: list[str] = []
    device = (device or "cpu").split(":")[0]
    precision = settings.get("matmul_precision")
    if precision:
        torch.set_float32_matmul_precision(precision)
        messages.append(f"float32 matmul precision: {precision}")
    allow_tf32 = bool(settings.get("allow_tf32", False))
    benchmark = bool(settings.get("cudnn_benchmark", False))
    if device == "cuda":
        # After set_float32_matmul_precision, which also toggles TF32 matmuls: the explicit switch wins.
        try:
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            torch.backends.cudnn.allow_tf32 = allow_tf32
            messages.append(f"TF32 matmuls and cuDNN convolutions: {'on' if allow_tf32 else 'off'}")
        except (AttributeError, RuntimeError) as exc:  # a torch whose TF32 API changed
            messages.append(f"TF32 not set: {exc}")
        torch.backends.cudnn.benchmark = benchmark
        messages.append(f"cudnn.benchmark: {'on' if benchmark else 'off'}")
    else:
        if allow_tf32:
            messages.append(f"allow_tf32 ignored on {device}: TF32 exists only on NVIDIA GPUs")
        if benchmark:
            messages.append(f"cudnn_benchmark ignored on {device}: cuDNN is CUDA only")
    return messages
