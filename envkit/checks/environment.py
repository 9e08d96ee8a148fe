"""The checks of the process environment: PyTorch's variables (misspelt, never read, unsafe,
thread counts) and the OpenMP runtimes bundled in site-packages."""

from __future__ import annotations

import difflib
import re
from pathlib import PurePath

from envkit.checks.gates import gates
from envkit.checks.threads import thread_problems
from envkit.checks.verdict import FAIL, PASS, SKIP, WARN, Check
from envkit.facts.bytecode_cache import PREFIX_VAR
from envkit.facts.model import Facts


def check_env_vars(facts: Facts) -> Check:
    g = gates()["env"]
    known = set(g["known"])
    env = facts.env
    problems, fixes = [], []
    not_read = g.get("not_read", {})
    for name, value in env.items():
        if name in not_read:
            problems.append(f"{name} is set, but PyTorch never reads it: it changes nothing ({not_read[name]})")
            fixes.append(f"unset {name}")
            continue
        if name.startswith("PYTORCH_") and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
            if close:
                problems.append(f"{name} is not a PyTorch variable (did you mean {close[0]}?)")
                fixes.append(f"unset {name}; export {close[0]}={_sh(value)}")
    for name in ("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "PYTORCH_MPS_LOW_WATERMARK_RATIO"):
        if name in env:
            try:
                ratio = float(env[name])
            except ValueError:
                problems.append(f"{name}={env[name]!r} is not a number")
                fixes.append(f"unset {name}")
                continue
            if name.endswith("HIGH_WATERMARK_RATIO") and ratio == 0.0:
                problems.append(f"{name}=0.0 removes the MPS memory cap, which PyTorch says 'may cause system failure'")
                fixes.append(f"unset {name} (default 1.7), or lower the batch size / use gradient accumulation")
    if "KMP_DUPLICATE_LIB_OK" in env:
        problems.append("KMP_DUPLICATE_LIB_OK is set: it hides a duplicate OpenMP runtime and is unsafe (pytorch#78490)")
        fixes.append("unset KMP_DUPLICATE_LIB_OK and remove the duplicate runtime (see the openmp check)")
    if facts.is_apple_silicon and not facts.python.rosetta:
        for name, value in g.get("recommended_mps", {}).items():
            if env.get(name) != value:
                problems.append(f"{name} is not {value}: an operator MPS lacks raises NotImplementedError instead of running on the CPU")
                fixes.append('eval "$(envkit env)" (or `envkit env --write .envkit`) sets the profile\'s variables')
    failures, warnings = thread_problems(env, g["threads"]["names"], facts.chip.cores)
    if failures:
        return Check("env-vars", FAIL, "; ".join([p for p, _ in failures + warnings] + problems),
                     "; ".join(dict.fromkeys([f for _, f in failures + warnings] + fixes)), "Environment", g["threads"]["source"])
    problems += [p for p, _ in warnings]
    fixes += [f for _, f in warnings]
    if problems:
        return Check("env-vars", WARN, "; ".join(problems), "; ".join(dict.fromkeys(fixes)) or None, "Environment",
                     g["threads"]["source"] if warnings else g["source"])
    shown = [k for k in env if k.startswith(("PYTORCH_", "OMP_", "MKL_"))]
    return Check("env-vars", PASS, "variables look right" + (f" ({', '.join(shown)})" if shown else ""), group="Environment")


def _sh(value: str) -> str:
    import shlex

    return shlex.quote(value)


def _omp_kind(path: str) -> str | None:
    name = PurePath(path).name
    if name.startswith("libiomp5"):
        return "intel"
    if name.startswith("libgomp"):
        return "gnu"
    if name.startswith("libomp"):
        return "llvm"
    return None


def _owner(path: str) -> str:
    parts = PurePath(path).parts
    if "site-packages" in parts:
        i = parts.index("site-packages")
        if i + 1 < len(parts):
            return re.sub(r"\.libs$|\.dylibs$", "", parts[i + 1])
    return str(PurePath(path).parent)


def check_openmp(facts: Facts) -> Check:
    libs = [p for p in facts.openmp_libs if _omp_kind(p)]
    if not libs:
        return Check("openmp", PASS, "no bundled OpenMP runtime found in site-packages", group="Environment")
    kinds: dict[str, list[str]] = {}
    for p in libs:
        if kind := _omp_kind(p):  # each has one (libs above)
            kinds.setdefault(kind, []).append(_owner(p))
    intel_llvm = kinds.get("intel", []) + kinds.get("llvm", [])
    owners = sorted(set(intel_llvm), key=lambda o: (o == "torch", o))  # torch's own copy is the one to keep
    source = "pytorch#78490, #83540"
    if facts.is_macos and len(intel_llvm) > 1:
        return Check("openmp", FAIL,
                     f"{len(intel_llvm)} OpenMP runtimes in site-packages ({', '.join(owners)}): loading both aborts with 'OMP: Error #15'",
                     "keep one: reinstall the other package from a build that uses torch's runtime "
                     f"(`pip uninstall {owners[0]}` and reinstall it), not KMP_DUPLICATE_LIB_OK",
                     "Environment", source)
    if kinds.get("intel") and kinds.get("llvm"):
        intel, llvm = ", ".join(sorted(set(kinds["intel"]))), ", ".join(sorted(set(kinds["llvm"])))
        return Check("openmp", WARN, f"both Intel (libiomp5: {intel}) and LLVM (libomp: {llvm}) OpenMP runtimes are installed",
                     "if you see 'OMP: Error #15', uninstall one of those packages; never set KMP_DUPLICATE_LIB_OK", "Environment", source)
    summary = ", ".join(f"{k}: {', '.join(sorted(set(v)))}" for k, v in kinds.items())
    return Check("openmp", PASS, f"one OpenMP runtime per kind ({summary})", group="Environment")


# benchmarks/RESULTS.md, "The first step against its floor": one H100 host, torch 2.11, the same processes
# with and without torch's bytecode.
_WITHOUT_BYTECODE = ("`import torch` took 4.0 s against 2.4 s, and torch.compile's imports 14.0 s against 6.9 s, "
                     "on an H100 host")


def check_bytecode(facts: Facts) -> Check:
    """torch's bytecode: without it, and where Python writes none, every process compiles torch's sources again."""
    code = facts.torch_bytecode
    if code is None:
        why = "torch is not installed (see the torch check)" if not facts.torch.version else "not recorded in this snapshot"
        return Check("bytecode", SKIP, why, group="Environment")
    # `envkit setup` writes the bytecode of what `import torch` loads, and of torch.compile's modules only
    # where training compiles by default (CUDA): install/act/plan.py, BYTECODE
    compile_missing = code.compile_compiled is False
    if code.compiled and not compile_missing:
        return Check("bytecode", PASS, "torch's modules are byte-compiled", group="Environment")
    if code.envkit_cache:  # install/bytecode.py: site-packages was not this user's to write
        return Check("bytecode", PASS, f"torch's modules are byte-compiled in envkit's cache ({code.envkit_cache}): `envkit run`, "
                     f"`exec` and `sweep` use it; your own `python` does with `export {PREFIX_VAR}={_sh(code.envkit_cache)}`",
                     group="Environment")
    if code.python_writes:
        message = ("torch's modules are byte-compiled; torch.compile's get theirs at its first use (once)" if code.compiled
                   else "torch's modules are not byte-compiled yet: the first import writes it (once)")
        return Check("bytecode", PASS, message, group="Environment")
    why = "PYTHONDONTWRITEBYTECODE is set" if code.dont_write_bytecode else f"{code.folder} is not writable for this user"
    python = facts.python.executable or "python"
    site = str(PurePath(code.folder).parent)  # torch.compile imports sympy, triton, jinja2... from there too
    message = (f"torch's modules are byte-compiled, torch.compile's are not and Python writes none ({why}): every process "
               f"that compiles compiles their sources again ({_WITHOUT_BYTECODE})" if code.compiled
               else f"torch's modules have no bytecode and Python writes none ({why}): every process compiles torch's "
               f"sources again ({_WITHOUT_BYTECODE})")
    if not code.writable:  # in place only as the folder's owner: envkit's own cache instead (install/bytecode.py)
        return Check("bytecode", WARN, message, f"envkit doctor --fix --python {_sh(python)} (compiles it into envkit's cache, "
                     f"which envkit's runs use), or as the folder's owner: {_sh(python)} -m compileall -q -j 0 {_sh(site)}",
                     "Environment")
    return Check("bytecode", WARN, message, f"{_sh(python)} -m compileall -q -j 0 {_sh(site)}", "Environment")
