"""Runs inside the interpreter being examined (stdlib only: that interpreter may lack envkit).

    python interp_probe.py '["torch", "numpy"]'   ->  JSON on stdout
"""

import json
import os
import platform
import sys

OMP_PREFIXES = ("libomp", "libiomp5", "libgomp")


def _version(name):
    from importlib import metadata

    try:
        return metadata.version(name)
    except Exception:
        return None


def _openmp_libs(roots):
    """OpenMP runtimes bundled by packages: torch/lib/libomp.dylib, faiss/.dylibs/libomp.dylib,
    scikit_learn.libs/libgomp-*.so. Two levels below site-packages is where wheels put them."""
    found = set()
    for root in roots:
        try:
            top = list(os.scandir(root))
        except OSError:
            continue
        for entry in top:
            if not entry.is_dir() or entry.name.endswith((".dist-info", "__pycache__")):
                continue
            for sub in (entry.path, os.path.join(entry.path, "lib"), os.path.join(entry.path, ".dylibs")):
                try:
                    names = os.listdir(sub)
                except OSError:
                    continue
                for n in names:
                    if n.startswith(OMP_PREFIXES) and (".so" in n or n.endswith(".dylib")):
                        found.add(os.path.join(sub, n))
    return sorted(found)


def _torch_cuda_requires():
    """PyPI's Linux torch wheels carry no +cuXXX label; their nvidia-cuda-runtime requirement tells the CUDA build."""
    from importlib import metadata

    try:
        reqs = metadata.requires("torch") or []
    except Exception:
        return []
    return [r for r in reqs if r.lower().startswith("nvidia-cuda-runtime")]


def probe(names):
    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix) or bool(os.environ.get("CONDA_PREFIX"))
    site = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    return {
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "machine": platform.machine(), "executable": sys.executable, "in_venv": in_venv,
                   "prefix": sys.prefix},
        "packages": {n: _version(n) for n in names},
        "openmp_libs": _openmp_libs(site),
        "torch_cuda_requires": _torch_cuda_requires(),
    }


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
