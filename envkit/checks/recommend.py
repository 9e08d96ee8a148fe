"""Which profile a machine should use: a small pure function of its facts (light-the-torch style),
then, on the live machine only, the profile `envkit tune` measured for it when there is one."""

from __future__ import annotations

from envkit.checks import accel
from envkit.checks.device import cuda_hidden
from envkit.errors import EnvkitError
from envkit.facts.collect import chips_data
from envkit.facts.model import ChipTier, Facts
from envkit.resources import user_dir

TIER_SUFFIX: dict[ChipTier, str] = {"base": "", "Pro": "-pro", "Max": "-max", "Ultra": "-ultra"}


def apple_profile(family: str | None, tier: ChipTier | None) -> tuple[str, str | None]:
    """("m3-max", None), or the nearest known chip's profile and a warning for a chip not in chips.toml."""
    families: dict[str, list[str]] = chips_data()["families"]
    tier = tier if tier in TIER_SUFFIX else "base"
    if family is not None and family in families and tier in families[family]:
        return family.lower() + TIER_SUFFIX[tier], None
    gen = int(family[1:]) if family and family[1:].isdigit() else None
    # Nearest: the newest known family at or below this one that has the tier (an M5 Max
    # gets m4-max; an M4 Ultra gets m3-ultra); a chip older than all gets the oldest.
    candidates = sorted(((int(f[1:]), f) for f, tiers in families.items() if tier in tiers), reverse=True)
    pick = None
    for g, f in candidates:
        if gen is None or g <= gen:
            pick = f
            break
    if pick is None and candidates:
        pick = candidates[-1][1]
    if pick is None:
        return "apple-silicon", f"unknown Apple chip {family} {tier}: using the generic apple-silicon profile"
    name = pick.lower() + TIER_SUFFIX[tier]
    chip = f"{family or 'Apple'} {tier}" if tier != "base" else f"{family or 'Apple chip'}"
    return name, f"{chip} is newer than envkit's tuned profiles: using {name}, the nearest known chip (measure and adjust)"


TUNED_SUFFIX = "-tuned"


def tuned_name(shipped: str) -> str:
    """The user profile `envkit tune` writes for a machine whose shipped profile is `shipped`."""
    return shipped + TUNED_SUFFIX


def tuned_profile_path(shipped: str):
    """The tuned profile file in the user profile folder, or None."""
    path = user_dir() / f"{tuned_name(shipped)}.toml"
    return path if path.is_file() else None


def recommend_profile(facts: Facts) -> tuple[str, str | None]:
    """(profile name, warning or None): the tuned profile of this machine when `envkit tune` wrote
    one (never for a replayed snapshot: that is another machine), else the shipped one."""
    name, warning = shipped_recommendation(facts)
    if getattr(facts, "source", "live") == "live" and tuned_profile_path(name) is not None:
        return tuned_name(name), warning
    return name, warning


def shipped_recommendation(facts: Facts) -> tuple[str, str | None]:
    """(shipped profile name, warning or None)."""
    if facts.is_apple_silicon:
        if facts.chip.family:
            return apple_profile(facts.chip.family, facts.chip.tier)
        return "apple-silicon", "could not tell which Apple chip this is: using the generic apple-silicon profile"
    rt = facts.runtime or {}

    if cuda_hidden(facts):  # CUDA_VISIBLE_DEVICES= on a GPU box: a CPU run, with the CPU's profile
        return "cpu", None
    if facts.nvidia_gpus or (rt.get("cuda_available") and not rt.get("hip_version")):  # ROCm torch answers torch.cuda too
        ccs = []
        for g in facts.nvidia_gpus:
            try:
                ccs.append(float(g.compute_capability or "unknown"))  # none known: skipped, as an unreadable one
            except ValueError:
                pass
        if ccs and min(ccs) >= 9.0:
            return "cuda-hopper", None
        return "cuda", None
    if facts.other_gpus:  # AMD (ROCm) or Intel (XPU): the build setup plans decides
        try:
            planned = accel.pick(facts, None, "stable")
        except EnvkitError as exc:
            return "cpu", f"{accel.describe(facts)}: {exc.message}; using the cpu profile"
        if planned.backend.kind == "rocm":
            return "rocm", None
        if planned.backend == "xpu":
            return "xpu", None
        return "cpu", None  # a GPU torch cannot use (an integrated one, most often): the CPU is this machine's device
    return "cpu", None
