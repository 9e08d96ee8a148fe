"""The checks of the software under training: the OS, the Python interpreter (its version and
architecture), the installed torch and its companions (torchvision, torchaudio)."""

from __future__ import annotations

from envkit.checks import builds
from envkit.checks.gates import V, gates, known, paired_versions
from envkit.checks.verdict import FAIL, PASS, SKIP, WARN, Check
from envkit.facts.model import Facts

NATIVE_PYTHON_FIX = ("install a native arm64 Python and recreate the environment: "
                     "`arch -arm64 /usr/bin/python3 -m venv .venv` (or Homebrew's /opt/homebrew/bin/python3), then `envkit setup`")


def check_os(facts: Facts) -> Check:
    o = facts.os
    if o.system == "Darwin":
        if not o.version:
            return Check("os", WARN, "could not read the macOS version",
                         "run `sw_vers -productVersion` and attach `envkit doctor --record snapshot.json` to a bug report", "System")
        text = f"macOS {o.version}" + (f" ({o.build})" if o.build else "")
        return Check("os", PASS, text + (f"; {o.note}" if o.note else ""), group="System")
    if o.system == "Linux":
        return Check("os", PASS, f"{o.name or 'Linux'}", group="System")
    return Check("os", WARN, f"{o.system}: envkit knows macOS and Linux best", "use macOS or Linux, or report what fails", "System")


def check_python_version(facts: Facts) -> Check:
    """torch's Python floor rose with its releases (torch_variants.toml: 3.9 up to 2.8, 3.10 from
    2.9): judged against the installed torch, else against the newest release."""
    pv = V(facts.python.version)
    if pv is None:
        return Check("python-version", WARN, "could not read the Python version", "run `python3 --version`", "Python")
    installed = facts.torch.base_version
    floor, source = builds.python_floor(installed)
    newest = builds.releases()[-1]
    if pv < known(floor):
        what = f"torch {installed}" if installed else f"torch {newest['torch']}"
        return Check("python-version", FAIL, f"Python {pv} is older than {floor}, the oldest {what} has wheels for",
                     "install Python 3.12 and run `envkit setup --python python3.12`", "Python", source)
    if installed and pv < known(newest["python"]):
        return Check("python-version", WARN, f"Python {pv} runs torch {installed}, but torch {newest['torch']} needs Python "
                     f"{newest['python']}+: this environment cannot move past its torch line",
                     "install Python 3.12 and run `envkit setup --python python3.12`", "Python", source)
    return Check("python-version", PASS, f"{facts.python.implementation or 'Python'} {pv}", group="Python")


def check_python_arch(facts: Facts) -> Check:
    p, c = facts.python, facts.chip
    if not p.machine:
        return Check("python-arch", WARN, "could not read the interpreter's architecture",
                     "run `python3 -c 'import platform; print(platform.machine())'`", "Python")
    if facts.is_macos and c.arm64_hardware:
        if p.rosetta:
            return Check("python-arch", FAIL,
                         f"this Python is x86_64 running under Rosetta on an {c.name or 'Apple silicon'} Mac: it never sees MPS and runs slower",
                         NATIVE_PYTHON_FIX, "Python", "Lightning-AI#14634; comfy-cli PR #568")
        return Check("python-arch", PASS, f"native {p.machine} interpreter", group="Python")
    return Check("python-arch", PASS, f"{p.machine} interpreter" + (" (Intel Mac)" if facts.is_macos else ""), group="Python")


def check_torch(facts: Facts) -> Check:
    t, rt = facts.torch, facts.runtime
    if not t.version:
        if rt and rt.get("ok"):  # importable but without metadata (a source build on sys.path)
            return Check("torch", PASS, f"torch {rt.get('torch_version')} (no installed metadata)")
        if rt and not rt.get("missing"):
            return Check("torch", FAIL, f"importing torch failed: {rt.get('error')}", "reinstall it: `envkit setup --torch stable`")
        return Check("torch", FAIL, "torch is not installed in this interpreter", "`envkit setup` creates an environment with the right torch build")
    if t.base_version is None:
        return Check("torch", WARN, f"installed torch reports an unreadable version {t.version!r}",
                     "reinstall it: `envkit setup --torch stable`")
    desc = f"torch {t.version} ({t.channel or 'unknown channel'}" + (f", {t.local} build" if t.local else "") + ")"
    if rt is not None and not rt.get("ok") and not rt.get("missing"):
        return Check("torch", FAIL, f"{desc} is installed but importing it failed: {rt.get('error')}",
                     "reinstall it: `envkit setup --torch stable`")
    if facts.is_macos and facts.chip.vendor == "intel":
        g = gates()["intel_mac"]
        return Check("torch", WARN, f"{desc}; Intel Mac: torch stops at {g['max_torch']} and trains on the CPU only",
                     "use an Apple silicon Mac or a CUDA machine for current torch", source=g["source"])
    return Check("torch", PASS, desc)


def check_pairing(facts: Facts) -> Check:
    t = facts.torch
    if not t.base_version:
        return Check("torch-pairing", SKIP, "torch is not installed (see the torch check)")
    want = paired_versions(t.version)
    installed = {n: facts.packages.get(n) for n in ("torchvision", "torchaudio") if facts.packages.get(n)}
    if not installed:
        return Check("torch-pairing", PASS, "no torchvision/torchaudio installed")
    if want is None:
        return Check("torch-pairing", WARN, f"no known pairing for torch {t.version}", "check PyTorch's compatibility matrix")
    bad = []
    for name, ver in installed.items():
        v = V(ver)
        if v is None or f"{v.major}.{v.minor}" != want[name]:
            bad.append(f"{name} {ver} (torch {t.base_version} pairs with {want[name]}.x)")
    if bad:
        pins = " ".join(f"'{n}=={want[n]}.*'" for n in installed)
        return Check("torch-pairing", FAIL,
                     "mismatched with torch: " + "; ".join(bad) + " — importing it fails (e.g. 'operator torchvision::nms does not exist')",
                     f"`envkit setup --with {','.join(installed)}` installs the paired releases (or pip install {pins} from torch's index)",
                     source=gates()["pairing"]["source"])
    return Check("torch-pairing", PASS, ", ".join(f"{n} {v}" for n, v in installed.items()) + f" paired with torch {t.base_version}")
