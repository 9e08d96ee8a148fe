"""The CUDA build an NVIDIA machine gets: the newest build of the requested release (or of today's
nightlies) that its driver runs and that holds kernels for its GPU; else an older release line,
else one line naming the constraint (the driver, or the GPU's architecture) and the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.checks import builds, gates
from envkit.errors import EnvkitError, NoBuildError
from envkit.facts.model import Facts
from envkit.install.choice import model
from envkit.install.choice.model import Choice, Request, spec_pins_minor

if TYPE_CHECKING:
    from envkit.facts.model import Channel


def cuda_choice(facts: Facts, request: Request, channel: Channel, companions: tuple[str, ...] = (),
          missing: dict[str, str] | None = None) -> Choice:
    """The newest CUDA build that (a) exists for the requested release or today's nightlies,
    (b) runs on this driver, (c) holds kernels for this GPU (torch_variants.toml)."""
    gpu = facts.nvidia_gpus[0]
    desc = f"{gpu.name}, driver {gpu.driver or 'unknown'}, compute capability {gpu.compute_capability or 'unknown'}"
    pinned = spec_pins_minor(request)
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
            choice = Choice(device="cuda", backend=build.backend, channel=channel, index_url=model.index_for(build.backend, channel),
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
                    choice = Choice(device="cuda", backend=build.backend, channel=channel, index_url=model.index_for(build.backend, channel),
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


def _build_problem(build: builds.Build, facts: Facts) -> str | None:
    """Why this CUDA build cannot run on this machine's GPUs and driver, or None."""
    need = gates.min_driver_for_cuda(build.cuda)
    for g in facts.nvidia_gpus:
        if need and gates.older_than(g.driver, need):
            return f"{build.backend} needs NVIDIA driver {need} or newer (this one is {g.driver})"
        if builds.runs_on(build, g.compute_capability) is False:
            return f"{build.backend} holds no kernels for {g.name} ({builds.sm_name(g.compute_capability)}): it holds {build.arch_text()}"
    return None


def _driver_short(build: builds.Build, facts: Facts) -> bool:
    need = gates.min_driver_for_cuda(build.cuda)
    return any(need and gates.older_than(g.driver, need) for g in facts.nvidia_gpus)


def _arch_fits(build: builds.Build, facts: Facts) -> bool:
    return all(builds.runs_on(build, g.compute_capability) is not False for g in facts.nvidia_gpus)


def _torchaudio_builds(row: dict, channel: Channel) -> set[str] | None:
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
    fits = [r for r in builds.releases() if pv is None or pv >= gates.known(r["python"])]
    return fits[-1] if fits else None


def _no_build(what: str, candidates: list, facts: Facts, why_not: list[str], channel: Channel) -> NoBuildError:
    """One line naming the constraint (the driver, or the GPU's architecture) and the fix."""
    gpu = facts.nvidia_gpus[0]
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
