"""A torch build as PyTorch's indexes and local version labels name it (`cu130`, `rocm6.4`, `xpu`,
`cpu`), or `pypi` / `mps` for PyPI's own wheels (macOS, with MPS). One value type in place of a
bare string, so what a build is (CUDA and which version, ROCm, XPU, CPU) is asked of it, never
spelt as `startswith("cu")` again. It is a `str` (the tag): it compares, prints, sorts and goes
into JSON as the tag it always was."""

from __future__ import annotations

import re
from typing import Literal

BuildKind = Literal["cuda", "rocm", "xpu", "cpu", "pypi", "other"]

_CUDA = re.compile(r"cu(\d+)(\d)")
_ROCM = re.compile(r"rocm(\d+(?:\.\d+)*)")


class TorchBuild(str):
    """`TorchBuild("cu128").kind == "cuda"`, `.cuda == "12.8"`; `TorchBuild("rocm6.4").rocm == "6.4"`."""

    __slots__ = ()

    @property
    def kind(self) -> BuildKind:
        if _CUDA.fullmatch(self):
            return "cuda"
        if _ROCM.fullmatch(self):
            return "rocm"
        if self in ("xpu", "cpu"):
            return "xpu" if self == "xpu" else "cpu"
        return "pypi" if self in ("pypi", "mps") else "other"

    @property
    def cuda(self) -> str | None:
        """"cu128" -> "12.8", "cu130" -> "13.0"; None for any other build."""
        m = _CUDA.fullmatch(self)
        return f"{m.group(1)}.{m.group(2)}" if m else None

    @property
    def rocm(self) -> str | None:
        """"rocm6.4" -> "6.4"; None for any other build."""
        m = _ROCM.fullmatch(self)
        return m.group(1) if m else None

    @classmethod
    def of_version(cls, version: str | None) -> TorchBuild | None:
        """The build a torch version's local label names ("2.13.0+cu130" -> cu130); None without one."""
        if not version or "+" not in version:
            return None
        return cls(version.split("+", 1)[1])
