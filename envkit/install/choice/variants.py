"""Which torch build this machine needs and where it lives: a small pure function of the facts
(light-the-torch style): a Mac's (PyPI's MPS wheels, or the nightly index), a CPU box's, an
AMD/Intel GPU's (checks/accel.py picks), an NVIDIA GPU's (cuda.py); then the Python floor and
the limits the gates set. The tables are data: envkit/data/torch_variants.toml for the builds,
envkit/data/gates.toml for the driver minimums, compute capabilities and macOS floors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.checks import accel, builds, gates
from envkit.errors import EnvkitError
from envkit.facts.model import Facts
from envkit.install.choice import model
from envkit.install.choice.cuda import cuda_choice
from envkit.install.choice.model import Choice, Request, spec_pins_minor
from envkit.facts.torch_build import TorchBuild

if TYPE_CHECKING:
    from envkit.facts.model import Channel


def choose(facts: Facts, request: Request, index_override: str | None = None, override_why: str = "",
           companions: tuple[str, ...] | list[str] = (), missing: dict[str, str] | None = None) -> Choice:
    """The build and index for this machine. Raises EnvkitError when no torch fits (with the fix).
    `missing`: builds whose index page was read and holds no torch for this request ({backend: why}),
    skipped like builds the table says do not exist."""
    channel = request.channel
    if facts.is_macos:
        choice = _macos(facts, request, channel)
    elif facts.nvidia_gpus:
        choice = cuda_choice(facts, request, channel, tuple(companions), dict(missing or {}))
    elif facts.other_gpus:
        choice = _amd_intel(facts, request, channel)
    else:
        choice = _cpu(facts, request, channel)
    _python_floor(facts, request, choice)
    if index_override:
        choice.notes.append(f"index {choice.index_url} replaced by {index_override} ({override_why})")
        choice.index_url, choice.index_why = index_override, override_why
    _check_request_against_limit(request, choice, facts)
    return choice


def _check_request_against_limit(request: Request, choice: Choice, facts: Facts) -> None:
    if not str(choice.limit):
        return
    pinned = spec_pins_minor(request)
    if pinned is None:
        return
    version = Version(f"{pinned.major}.{pinned.minor}.0") if len(pinned.release) == 2 else Version(pinned.public)
    if choice.limit.contains(version, prereleases=True):
        return
    if choice.device == "mps":
        floor, source = gates.macos_floor_for_mps(str(version))
        raise EnvkitError(f"torch {request.text} needs macOS {floor} for MPS and this Mac runs macOS {facts.os.version} ({source})",
                          fix=f"update macOS to {floor} or newer, or ask for --torch '{choice.limit}' (stable stays within it)")
    raise EnvkitError(f"torch {request.text} cannot work here: {'; '.join(choice.limit_why)}",
                      fix=f"ask for --torch '{choice.limit}' (stable stays within it)")


def _macos(facts: Facts, request: Request, channel: Channel) -> Choice:
    data = model.variants_data()["macos"]
    macos = gates.V(facts.os.version)
    if facts.is_apple_silicon and facts.python.rosetta:
        raise EnvkitError("this Python is x86_64 running under Rosetta: it never sees MPS, and x86_64 macOS torch stops at 2.2.2",
                          fix="install a native arm64 Python (e.g. python.org's universal2 installer or `brew install python`) "
                              "and pass it with --python")
    if not facts.is_apple_silicon:
        g = gates.gates()["intel_mac"]
        if channel != "stable":
            raise EnvkitError(f"there are no {channel} builds of torch for Intel Macs: x86_64 macOS wheels stop at torch {g['max_torch']}",
                              fix=f"use --torch stable (torch {g['max_torch']}) or a Mac with Apple silicon")
        return Choice(device="cpu", backend=TorchBuild("pypi"), channel="stable", index_url=model.index_for("pypi", "stable"),
                      index_why="PyPI: the macOS wheels", limit=SpecifierSet(f"<={g['max_torch']}"),
                      limit_why=[f"Intel Mac: x86_64 macOS wheels stop at torch {g['max_torch']} ({g['source']})"],
                      notes=[f"Intel Macs stop at torch {g['max_torch']}: no MPS, CPU only"])
    floor_min = gates.known(gates.gates()["mps"]["min_macos"])
    if macos is not None and macos < floor_min:
        raise EnvkitError(f"macOS {facts.os.version} is older than {floor_min}, the first macOS with MPS",
                          fix=f"update macOS to {floor_min} or newer")
    if channel == "stable":
        choice = Choice(device="mps", backend=TorchBuild("pypi"), channel="stable", index_url=model.index_for("pypi", "stable"),
                        index_why="PyPI: its macOS arm64 wheels are the MPS builds")
    else:
        backend = TorchBuild(data["arm64_nightly_backend"] if channel == "nightly" else data["arm64_test_backend"])
        choice = Choice(device="mps", backend=backend, channel=channel, index_url=model.index_for(backend, channel),
                        index_why=f"PyTorch's {channel} index (macOS {channel} wheels live under /{backend})")
    if macos is not None:
        spec = gates.newest_torch_spec_for_macos(macos)
        if spec:
            low = spec.lstrip("<")
            floor, source = gates.macos_floor_for_mps(low)
            choice.limit = SpecifierSet(spec)
            choice.limit_why.append(f"torch {low}+ needs macOS {floor} for MPS and this Mac runs macOS {facts.os.version} ({source})")
            if channel == "nightly":
                raise EnvkitError(f"torch nightly needs macOS {floor} for MPS and this Mac runs macOS {facts.os.version} ({source})",
                                  fix=f"update macOS to {floor} or newer, or use --torch stable (torch {spec} here)")
    return choice


def _cpu(facts: Facts, request: Request, channel: Channel) -> Choice:
    lin = model.variants_data()["linux"]
    local = lin["cpu_local_label"] if facts.os.system == "Linux" and (facts.python.machine or "") in lin["cpu_label_archs"] else None
    choice = Choice(device="cpu", backend=TorchBuild("cpu"), channel=channel, index_url=model.index_for("cpu", channel),
                    index_why="PyTorch's CPU index: no NVIDIA GPU on this machine", local=local)
    if local:
        choice.notes.append(f"only +{local} builds are accepted: PyPI's Linux torch is a CUDA build (several GB) and this machine has no GPU")
    return choice


def _python_floor(facts: Facts, request: Request, choice: Choice) -> None:
    """torch's wheels start at a Python that rose with the releases (3.9 up to 2.8, 3.10 from 2.9):
    a pinned release this Python cannot run is refused; stable stays within the releases it can."""
    pv = gates.V(facts.python.version)
    if pv is None or facts.is_macos and not facts.is_apple_silicon:
        return
    pinned = spec_pins_minor(request)
    if pinned is not None or request.kind == "nightly":
        floor, source = builds.python_floor(pinned)
        if pv < gates.known(floor):
            what = f"torch {request.text}" if pinned is not None else "torch nightly"
            raise EnvkitError(f"{what} has wheels for Python {floor} and newer only; this Python is {facts.python.version} ({source})",
                              where="--torch", fix=f"pass --python with a Python {floor} or newer (e.g. --python python3.12)")
        return
    if request.kind != "stable":
        return
    fits = [r for r in builds.releases() if pv >= gates.known(r["python"])]
    newest = builds.releases()[-1]
    if fits and fits[-1] is not newest:
        v = Version(fits[-1]["torch"])
        nxt = f"{v.major}.{v.minor + 1}"
        choice.limit = SpecifierSet(",".join(x for x in (str(choice.limit), f"<{nxt}") if x))
        choice.limit_why.append(f"torch {nxt}+ has wheels for Python {builds.python_floor(nxt)[0]}+ only; this Python is {facts.python.version}")


def _amd_intel(facts: Facts, request: Request, channel: Channel) -> Choice:
    """AMD (ROCm) and Intel (XPU) GPUs: envkit/checks/accel.py picks the build from
    envkit/data/accelerators.toml; a GPU no build runs gets the CPU index with the reason."""
    pinned = spec_pins_minor(request)
    pick = accel.pick(facts, f"{pinned.major}.{pinned.minor}" if pinned else None, channel)
    if pick.backend == "cpu":
        choice = _cpu(facts, request, channel)
        choice.index_why, choice.notes = pick.why, pick.notes + choice.notes
        return choice
    choice = Choice(device=pick.device, backend=pick.backend, channel=channel, index_url=model.index_for(pick.backend, channel),
                    index_why=pick.why, notes=list(pick.notes))
    if pick.limit:
        choice.limit, choice.limit_why = SpecifierSet(pick.limit), [pick.notes[-1] if pick.notes else pick.why]
    return choice
