"""Which torch build this machine needs and where it lives: a small pure function of the facts
(light-the-torch style). The tables are data: envkit/data/torch_variants.toml for the builds,
envkit/data/gates.toml for the driver minimums, compute capabilities and macOS floors."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envkit.checks import builds, gates
from envkit.errors import EnvkitError, NoBuildError
from envkit.facts.model import Facts


def variants_data() -> dict:
    return builds.table()


@dataclass(frozen=True)
class Request:
    """What the user asked for with --torch."""

    text: str
    kind: str  # stable, nightly, test, spec
    spec: SpecifierSet | None = None

    @property
    def channel(self) -> str:
        if self.kind in ("nightly", "test"):
            return self.kind
        if self.spec is not None:
            for s in self.spec:
                v = Version(s.version.rstrip(".*")) if s.version.rstrip(".*") else None
                if v is not None and v.is_devrelease:
                    return "nightly"
                if v is not None and v.is_prerelease:
                    return "test"
        return "stable"

    @property
    def prereleases(self) -> bool:
        return self.kind in ("nightly", "test") or bool(self.spec is not None and self.spec.prereleases)

    def admits(self, version: Version) -> bool:
        public = Version(version.public)
        if self.kind == "stable":
            return not public.is_prerelease
        if self.kind == "nightly":
            return public.is_devrelease
        if self.kind == "test":
            return public.is_prerelease and not public.is_devrelease
        return self.spec.contains(public, prereleases=self.prereleases)


def parse_request(text: str | None) -> Request:
    t = (text or "stable").strip()
    low = t.lower()
    if low in ("stable", "latest", "release"):
        return Request(t, "stable")
    if low == "nightly":
        return Request(t, "nightly")
    if low in ("test", "rc"):
        return Request(t, "test")
    spec_text = t
    if re.fullmatch(r"\d+(\.\d+)*([a-z0-9.+]*)", low):
        try:
            v = Version(t)
        except InvalidVersion:
            v = None
        if v is not None:
            spec_text = f"=={t}.*" if len(v.release) == 2 and not v.pre and not v.dev and not v.local else f"=={t}"
    try:
        spec = SpecifierSet(spec_text)
        if not str(spec):
            raise InvalidSpecifier(t)
    except InvalidSpecifier:
        raise EnvkitError(f"--torch {t!r} is not a version, a specifier or a channel",
                          fix="use stable, nightly, test, a version like 2.5.1, or a specifier like '>=2.5,<2.7'")
    return Request(t, "spec", spec)


@dataclass
class Choice:
    """Where torch comes from for this machine and request."""

    device: str  # mps, cuda, cpu
    backend: str  # "cpu", "cu128", or "pypi" (macOS wheels with MPS)
    channel: str  # stable, nightly, test
    index_url: str
    index_why: str
    limit: SpecifierSet = field(default_factory=SpecifierSet)  # what the gates allow
    limit_why: list[str] = field(default_factory=list)
    local: str | None = None  # the local label every torch must carry ("cpu" on Linux x86_64 without GPU)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"device": self.device, "backend": self.backend, "channel": self.channel, "index_url": self.index_url,
                "index_why": self.index_why, "limit": str(self.limit) or None, "limit_why": self.limit_why,
                "required_local_label": self.local, "notes": self.notes}


def index_for(backend: str, channel: str) -> str:
    """PyTorch's index of one build: BASE/cu126, BASE/nightly/cu130. BASE is ENVKIT_PYTORCH_INDEX
    when set (a mirror laid out like download.pytorch.org/whl), else the table's."""
    import os

    d = variants_data()["index"]
    if backend == "pypi":
        return d["pypi"]
    sub = d[channel]
    base = os.environ.get("ENVKIT_PYTORCH_INDEX", "").rstrip("/") or d["base"]
    return "/".join(p for p in (base, sub, backend) if p)


def cuda_of(backend: str) -> str | None:
    return builds.cuda_of(backend)


def _spec_pins_minor(request: Request) -> Version | None:
    """The release line a pinned request names ("2.5.1", "2.9"): None for ranges and channels."""
    if request.spec is None:
        return None
    for s in request.spec:
        if s.operator in ("==", "==="):
            try:
                return Version(s.version.rstrip(".*"))
            except InvalidVersion:
                return None
    return None


def _build_problem(build: builds.Build, facts: Facts) -> str | None:
    """Why this CUDA build cannot run on this machine's GPUs and driver, or None."""
    need = gates.min_driver_for_cuda(build.cuda)
    for g in facts.gpus:
        if need and g.driver and gates.V(g.driver) and gates.V(g.driver) < gates.V(need):
            return f"{build.backend} needs NVIDIA driver {need} or newer (this one is {g.driver})"
        if builds.runs_on(build, g.compute_capability) is False:
            return f"{build.backend} holds no kernels for {g.name} ({builds.sm_name(g.compute_capability)}): it holds {build.arch_text()}"
    return None


def _driver_short(build: builds.Build, facts: Facts) -> bool:
    need = gates.min_driver_for_cuda(build.cuda)
    return any(need and g.driver and gates.V(g.driver) and gates.V(g.driver) < gates.V(need) for g in facts.gpus)


def _arch_fits(build: builds.Build, facts: Facts) -> bool:
    return all(builds.runs_on(build, g.compute_capability) is not False for g in facts.gpus)


def choose(facts: Facts, request: Request, index_override: str | None = None, override_why: str = "",
           companions: tuple[str, ...] | list[str] = (), missing: dict[str, str] | None = None) -> Choice:
    """The build and index for this machine. Raises EnvkitError when no torch fits (with the fix).
    `missing`: builds whose index page was read and holds no torch for this request ({backend: why}),
    skipped like builds the table says do not exist."""
    channel = request.channel
    if facts.is_macos:
        choice = _macos(facts, request, channel)
    elif facts.gpus:
        choice = _cuda(facts, request, channel, tuple(companions), dict(missing or {}))
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
    pinned = _spec_pins_minor(request)
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


def _macos(facts: Facts, request: Request, channel: str) -> Choice:
    data = variants_data()["macos"]
    macos = gates.V(facts.os.version)
    if facts.is_apple_silicon and facts.python.rosetta:
        raise EnvkitError("this Python is x86_64 running under Rosetta: it never sees MPS, and x86_64 macOS torch stops at 2.2.2",
                          fix="install a native arm64 Python (e.g. python.org's universal2 installer or `brew install python`) and pass it with --python")
    if not facts.is_apple_silicon:
        g = gates.gates()["intel_mac"]
        if channel != "stable":
            raise EnvkitError(f"there are no {channel} builds of torch for Intel Macs: x86_64 macOS wheels stop at torch {g['max_torch']}",
                              fix=f"use --torch stable (torch {g['max_torch']}) or a Mac with Apple silicon")
        return Choice(device="cpu", backend="pypi", channel="stable", index_url=index_for("pypi", "stable"),
                      index_why="PyPI: the macOS wheels", limit=SpecifierSet(f"<={g['max_torch']}"),
                      limit_why=[f"Intel Mac: x86_64 macOS wheels stop at torch {g['max_torch']} ({g['source']})"],
                      notes=[f"Intel Macs stop at torch {g['max_torch']}: no MPS, CPU only"])
    floor_min = gates.V(gates.gates()["mps"]["min_macos"])
    if macos is not None and macos < floor_min:
        raise EnvkitError(f"macOS {facts.os.version} is older than {floor_min}, the first macOS with MPS", fix=f"update macOS to {floor_min} or newer")
    if channel == "stable":
        choice = Choice(device="mps", backend="pypi", channel="stable", index_url=index_for("pypi", "stable"),
                        index_why="PyPI: its macOS arm64 wheels are the MPS builds")
    else:
        backend = data["arm64_nightly_backend"] if channel == "nightly" else data["arm64_test_backend"]
        choice = Choice(device="mps", backend=backend, channel=channel, index_url=index_for(backend, channel),
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


def _cpu(facts: Facts, request: Request, channel: str) -> Choice:
    lin = variants_data()["linux"]
    local = lin["cpu_local_label"] if facts.os.system == "Linux" and (facts.python.machine or "") in lin["cpu_label_archs"] else None
    choice = Choice(device="cpu", backend="cpu", channel=channel, index_url=index_for("cpu", channel),
                    index_why="PyTorch's CPU index: no NVIDIA GPU on this machine", local=local)
    if local:
        choice.notes.append(f"only +{local} builds are accepted: PyPI's Linux torch is a CUDA build (several GB) and this machine has no GPU")
    return choice


def _cuda(facts: Facts, request: Request, channel: str, companions: tuple[str, ...] = (),
          missing: dict[str, str] | None = None) -> Choice:
    """The newest CUDA build that (a) exists for the requested release or today's nightlies,
    (b) runs on this driver, (c) holds kernels for this GPU (torch_variants.toml)."""
    gpu = facts.gpus[0]
    desc = f"{gpu.name}, driver {gpu.driver or 'unknown'}, compute capability {gpu.compute_capability or 'unknown'}"
    pinned = _spec_pins_minor(request)
    if channel == "nightly":
        row, assumed, what = builds.nightly_row(), False, "the newest nightly builds"
    else:
        row, assumed = builds.release_row(pinned)
        if pinned is None and channel == "stable":
            row = _newest_row_for_python(facts) or row  # stable on Python 3.9: 2.8's builds, not 2.14's
            assumed = False
        what = f"torch {row['torch']}" if not assumed or pinned is None else f"torch {pinned.major}.{pinned.minor}"
    candidates = builds.cuda_builds(row)
    published = ", ".join(b.backend for b in candidates)
    why_not = []
    audio = _torchaudio_builds(row, channel) if "torchaudio" in companions else None
    missing = missing or {}
    for build in reversed(candidates):
        problem = _build_problem(build, facts) or missing.get(build.backend)
        if problem is None and audio is not None and build.backend not in audio:
            last, _ = gates.torchaudio_last()
            why_not.append(f"{build.backend}: torchaudio {last}, its last release, has no {build.backend} build")
            continue
        if problem is None:
            choice = Choice(device="cuda", backend=build.backend, channel=channel, index_url=index_for(build.backend, channel),
                            index_why=f"PyTorch's {build.backend} index: the newest build of {what} ({published}) this GPU and driver run ({desc})")
            if assumed and pinned is not None:
                choice.notes.append(f"torch {pinned.major}.{pinned.minor} is newer than envkit's build table (checked "
                                    f"{builds.table()['checked']}): assumed to have torch {row['torch']}'s builds ({published})")
            if why_not:
                choice.notes.append("newer builds skipped: " + "; ".join(why_not))
            if audio is not None:
                last, source = gates.torchaudio_last()
                choice.notes.append(f"torchaudio {last} is its last release and pairs with torch {last} and later ({source})")
            return choice
        why_not.append(problem)
    if audio is not None and any(_build_problem(b, facts) is None for b in candidates):
        last, source = gates.torchaudio_last()
        raise EnvkitError(f"torchaudio has no release after {last}, and torchaudio {last} has no build of {what} this machine runs "
                          f"(it exists for {', '.join(sorted(audio))}; {source})",
                          where="--with", fix=f"drop torchaudio from --with (torchcodec replaces its I/O), or ask for --torch {last}")
    # No build of this release fits: an older release line may (stable/range requests only).
    if channel == "stable" and pinned is None:
        for older in reversed(builds.releases()):
            for build in reversed(builds.cuda_builds(older)):
                if _build_problem(build, facts) is None:
                    v = Version(older["torch"])
                    nxt = f"{v.major}.{v.minor + 1}"
                    choice = Choice(device="cuda", backend=build.backend, channel=channel, index_url=index_for(build.backend, channel),
                                    index_why=f"PyTorch's {build.backend} index: the newest CUDA build this GPU and driver run ({desc})",
                                    limit=SpecifierSet(f"<{nxt}"),
                                    limit_why=[f"torch {nxt}+ has no CUDA build for this machine: " + "; ".join(why_not)])
                    choice.notes.append(f"torch stays below {nxt}: newer releases have no build for this machine ({'; '.join(why_not)})")
                    return choice
    if any(b.backend in missing and _build_problem(b, facts) is None for b in candidates):
        raise EnvkitError(f"no build of {what} this machine runs holds torch {request.text} on PyTorch's index: "
                          + "; ".join(why_not), fix="ask for another --torch, or point --index-url at an index that has it")
    subject = what if channel == "nightly" else f"the builds of {what} ({published})"
    raise _no_build(subject, candidates, facts, why_not, channel)


def _torchaudio_builds(row: dict, channel: str) -> set[str] | None:
    """The CUDA builds torchaudio exists for beside this release, or None when it pairs release
    for release (up to its last release, which pairs with every later torch: gates.toml)."""
    last, _ = gates.torchaudio_last()
    lv, rv = Version(last), Version(row.get("torch", "99.0"))
    if channel != "nightly" and (rv.major, rv.minor) < (lv.major, lv.minor):
        return None
    last_row, _ = builds.release_row(last)
    return {b.backend for b in builds.cuda_builds(last_row)}


def _newest_row_for_python(facts: Facts) -> dict | None:
    pv = gates.V(facts.python.version)
    fits = [r for r in builds.releases() if pv is None or pv >= gates.V(r["python"])]
    return fits[-1] if fits else None


def _python_floor(facts: Facts, request: Request, choice: Choice) -> None:
    """torch's wheels start at a Python that rose with the releases (3.9 up to 2.8, 3.10 from 2.9):
    a pinned release this Python cannot run is refused; stable stays within the releases it can."""
    pv = gates.V(facts.python.version)
    if pv is None or facts.is_macos and not facts.is_apple_silicon:
        return
    pinned = _spec_pins_minor(request)
    if pinned is not None or request.kind == "nightly":
        floor, source = builds.python_floor(pinned)
        if pv < gates.V(floor):
            what = f"torch {request.text}" if pinned is not None else "torch nightly"
            raise EnvkitError(f"{what} has wheels for Python {floor} and newer only; this Python is {facts.python.version} ({source})",
                              where="--torch", fix=f"pass --python with a Python {floor} or newer (e.g. --python python3.12)")
        return
    if request.kind != "stable":
        return
    fits = [r for r in builds.releases() if pv >= gates.V(r["python"])]
    newest = builds.releases()[-1]
    if fits and fits[-1] is not newest:
        v = Version(fits[-1]["torch"])
        nxt = f"{v.major}.{v.minor + 1}"
        choice.limit = SpecifierSet(",".join(x for x in (str(choice.limit), f"<{nxt}") if x))
        choice.limit_why.append(f"torch {nxt}+ has wheels for Python {builds.python_floor(nxt)[0]}+ only; this Python is {facts.python.version}")


def _no_build(what: str, candidates: list, facts: Facts, why_not: list[str], channel: str) -> NoBuildError:
    """One line naming the constraint (the driver, or the GPU's architecture) and the fix."""
    gpu = facts.gpus[0]
    newest_fit = None
    for row in reversed(builds.releases()):
        if any(_build_problem(b, facts) is None for b in builds.cuda_builds(row)):
            newest_fit = row["torch"]
            break
    older = "`--torch stable`" if channel != "stable" else (f"`--torch {newest_fit}`" if newest_fit else "an older `--torch`")
    arch_ok = [b for b in candidates if _arch_fits(b, facts)]
    if arch_ok and all(_driver_short(b, facts) for b in arch_ok):
        oldest = arch_ok[0]
        need = gates.min_driver_for_cuda(oldest.cuda)
        if len(arch_ok) < len(candidates):
            what = f"{what.split(' (')[0]} with kernels for {builds.sm_name(gpu.compute_capability)} ({', '.join(b.backend for b in arch_ok)})"
        return NoBuildError(f"{what} need driver {need} or newer (CUDA {oldest.cuda}); this machine has {gpu.driver}",
                            fix=f"upgrade the driver, or use {older}")
    fix = f"use `--torch {newest_fit}` (the newest release with a build for this GPU)" if newest_fit else "use a newer GPU"
    return NoBuildError(f"{what} hold no kernels for {gpu.name} ({builds.sm_name(gpu.compute_capability)}): " + "; ".join(why_not),
                        fix=fix)


def _amd_intel(facts: Facts, request: Request, channel: str) -> Choice:
    """AMD (ROCm) and Intel (XPU) GPUs: envkit/checks/accel.py picks the build from
    envkit/data/accelerators.toml; a GPU no build runs gets the CPU index with the reason."""
    from envkit.checks import accel

    pinned = _spec_pins_minor(request)
    pick = accel.pick(facts, f"{pinned.major}.{pinned.minor}" if pinned else None, channel)
    if pick.backend == "cpu":
        choice = _cpu(facts, request, channel)
        choice.index_why, choice.notes = pick.why, pick.notes + choice.notes
        return choice
    choice = Choice(device=pick.device, backend=pick.backend, channel=channel, index_url=index_for(pick.backend, channel),
                    index_why=pick.why, notes=list(pick.notes))
    if pick.limit:
        choice.limit, choice.limit_why = SpecifierSet(pick.limit), [pick.notes[-1] if pick.notes else pick.why]
    return choice
