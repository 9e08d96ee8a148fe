"""Runs inside the interpreter being examined (stdlib only: that interpreter may lack envkit).

    python interp_probe.py '["torch", "numpy"]' [BYTECODE_PREFIX]   ->  JSON on stdout

BYTECODE_PREFIX: envkit's bytecode cache for this interpreter (facts/bytecode_cache.py), where it has one:
whether torch's bytecode is found there is reported too.
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


def _writable(path):
    """Whether this process may create `path` (a file or folder): the nearest folder that exists is writable."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.access(path, os.W_OK)


def _in_prefix(source, prefix):
    """Where a Python run with PYTHONPYCACHEPREFIX=prefix reads the bytecode of `source` (importlib's
    cache_from_source under sys.pycache_prefix: the source's absolute folder mirrored under the prefix)."""
    head, tail = os.path.split(os.path.abspath(source))
    return os.path.join(prefix, head.lstrip(os.sep), "%s.%s.pyc" % (tail.rsplit(".", 1)[0], sys.implementation.cache_tag))


def _torch_bytecode(prefix=None):
    """Whether torch's modules have their bytecode, and whether this Python writes what is missing when it
    imports them (None: no torch, found without importing it). A torch with neither is compiled from its
    sources by every process that imports it: seconds each time (benchmarks/RESULTS.md, the first step)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    folder = os.path.dirname(spec.origin)

    def caches(*paths):
        sources = [os.path.join(folder, *p) for p in paths]
        return [importlib.util.cache_from_source(p) for p in sources if os.path.isfile(p)]

    # pip compiles every module or none; envkit setup's verification writes what `import torch` loads
    # (the package, a module it imports), and torch.compile's on a CUDA machine only
    imported, compiling = caches(("__init__.py",), ("nn", "modules", "module.py")), caches(("_dynamo", "__init__.py"))
    sources = [os.path.join(folder, *p) for p in (("__init__.py",), ("nn", "modules", "module.py"), ("_dynamo", "__init__.py"))]
    # the cache's folder where torch's bytecode is found there, else None
    in_cache = prefix if prefix and all(os.path.isfile(_in_prefix(s, prefix)) for s in sources if os.path.isfile(s)) else None
    return {"folder": folder, "compiled": all(os.path.isfile(c) for c in imported),
            "compile_compiled": all(os.path.isfile(c) for c in compiling) if compiling else None,
            "dont_write_bytecode": bool(sys.flags.dont_write_bytecode),
            "writable": all(_writable(os.path.dirname(c)) for c in imported + compiling),
            "envkit_cache": in_cache}


def probe(names, bytecode_prefix=None):
    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix) or bool(os.environ.get("CONDA_PREFIX"))
    site = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    return {
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "machine": platform.machine(), "executable": sys.executable, "in_venv": in_venv,
                   "prefix": sys.prefix},
        "packages": {n: _version(n) for n in names},
        "openmp_libs": _openmp_libs(site),
        "torch_cuda_requires": _torch_cuda_requires(),
        "torch_bytecode": _torch_bytecode(bytecode_prefix),
    }


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)))
