"""The wheels of a PyTorch-style index (per-build pages) and a PyPI-style index for the pylock
tests: torch 2.12.0 and 2.13.0 as a macOS arm64 build (on "PyPI"), +cpu and +cu130 Linux x86_64
builds, a +cu130 aarch64 build, a cu129 build of 2.12.0 only, torchvision 0.27/0.28 beside them,
and their dependencies (tiny)."""

from __future__ import annotations

from pathlib import Path

from localindex import PY, build_wheel

X86 = "manylinux_2_28_x86_64"
ARM = "manylinux_2_28_aarch64"
MAC = "macosx_11_0_arm64"
TORCH_DEPS = ["filelock", "typing-extensions>=4.10", 'sympy>=1.13; python_version >= "3.9"',
              'opt-einsum>=3.3; extra == "opt-einsum"']  # an extra's requirement: never locked
CUDA_DEPS = ['nvidia-cuda-runtime==13.0.96; platform_system == "Linux"']


def build(directory: Path) -> dict[str, list[Path]]:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)

    def torch(version, platform, deps=()):
        return build_wheel(d, "torch", version, f"{PY}-{PY}-{platform}" if platform != MAC else f"{PY}-none-{MAC}",
                           requires=TORCH_DEPS + list(deps))

    def vision(version, platform):  # released with torch 2.13 (0.28) and 2.12 (0.27)
        return build_wheel(d, "torchvision", version, f"{PY}-{PY}-{platform}" if platform != MAC else f"{PY}-none-{MAC}",
                           requires=["numpy", f"torch=={'2.13.0' if version.startswith('0.28') else '2.12.0'}"])

    pypi = [torch("2.12.0", MAC), torch("2.13.0", MAC), vision("0.27.0", MAC), vision("0.28.0", MAC),
            build_wheel(d, "filelock", "3.16.1", "py3-none-any"),
            build_wheel(d, "typing-extensions", "4.9.0", "py3-none-any"),
            build_wheel(d, "typing-extensions", "4.12.2", "py3-none-any"),
            build_wheel(d, "sympy", "1.14.0", "py3-none-any", requires=["mpmath<1.4,>=1.1.0"]),
            build_wheel(d, "mpmath", "1.3.0", "py3-none-any"),
            build_wheel(d, "mpmath", "1.4.1", "py3-none-any"),
            build_wheel(d, "nvidia-cuda-runtime", "13.0.96", f"py3-none-{X86}"),
            build_wheel(d, "nvidia-cuda-runtime", "13.0.96", f"py3-none-{ARM}")]
    pypi += [build_wheel(d, "numpy", "2.2.6", f"{PY}-{PY}-{plat}") for plat in (X86, ARM, "macosx_14_0_arm64")]
    return {
        "pypi": pypi,
        "cpu": [torch("2.12.0+cpu", X86), torch("2.13.0+cpu", X86), vision("0.27.0+cpu", X86), vision("0.28.0+cpu", X86)],
        "cu130": [torch("2.12.0+cu130", X86, CUDA_DEPS), torch("2.13.0+cu130", X86, CUDA_DEPS),
                  torch("2.13.0+cu130", ARM, CUDA_DEPS), vision("0.28.0+cu130", X86), vision("0.28.0+cu130", ARM)],
        "cu129": [torch("2.12.0+cu129", X86)],
        # ROCm's triton lives on PyTorch's index only (uv is pointed at the build's page after the others)
        "rocm6.4": [torch("2.13.0+rocm6.4", X86, ["pytorch-triton-rocm==3.5.0"]),
                    build_wheel(d, "pytorch-triton-rocm", "3.5.0", f"{PY}-{PY}-{X86}")],
    }
