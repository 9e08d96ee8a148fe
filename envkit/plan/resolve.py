"""The config resolved with its profile: which interpreter trains (the managed environment's, or
this one), the facts of the machine it runs on, the profile they recommend (or the one asked for),
and train.yaml read over it (defaults < profile < YAML < --set), its dataset path made absolute
(the child runs elsewhere); and a sweep's config for each combination of its grid."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envkit.errors import EnvkitError
from envkit.plan.grid import Combination
from envkit.config.paths import resolve_path
from envkit.config.config import Config, load_config, read_yaml

if TYPE_CHECKING:
    from envkit.facts.model import Facts
    from envkit.install.setup.managed import Managed
    from envkit.profiles.resolve import Profile


@dataclass(frozen=True)
class Resolved:
    cfg: Config
    facts: Facts
    profile: Profile | None
    python: str
    managed: Managed | None
    notes: tuple[str, ...] = ()  # the profile's warnings, then the config's own (a value another makes moot)
    profile_note: str | None = None  # why the profile could not be loaded (built-in defaults instead)


def load_profile_or_note(name: str, facts, explicit: bool):
    """(profile or None, note): a profile that was not asked for and cannot load leaves the built-in defaults."""
    from envkit.profiles import load_profile

    try:
        return load_profile(name, facts=facts), None
    except EnvkitError:
        if explicit:
            raise
        return None, f"profile {name!r} could not be loaded: built-in defaults"


def resolve(config: str | None, *, overrides=(), profile_name: str | None = None, replay: str | None = None,
            python: str | None = None) -> Resolved:
    """Everything before the run: config resolved with the profile (dataset path absolute), facts of the machine."""
    from envkit.facts import gather
    from envkit.install.setup.managed import find_managed

    managed = None if replay else find_managed()
    py = python or (str(managed.python) if managed else sys.executable)
    facts = gather(replay, runtime=False, gpu_detail=False, python=None if replay else py)
    explicit = profile_name is not None
    if profile_name is None:
        profile_name = managed.profile if managed and managed.profile else None
    if profile_name is None:
        from envkit.checks.recommend import recommend_profile

        profile_name = recommend_profile(facts)[0]
    profile, note = load_profile_or_note(profile_name, facts, explicit)
    cfg = absolutise_paths(load_config(config, overrides=list(overrides), profile=profile))
    notes = (*(getattr(profile, "warnings", []) or [] if profile is not None else []), *cfg.notes)
    return Resolved(cfg, facts, profile, py, managed, notes, note)


def combination_configs(config: str, overrides, combinations: list[Combination], profile) -> list[Config]:
    """The config of each combination of a sweep: its grid values as the last --set (the file read once)."""
    data = read_yaml(config)
    return [absolutise_paths(load_config(config, overrides=[*overrides, *c.set_args()], profile=profile, data=data))
            for c in combinations]


def absolutise_paths(cfg: Config) -> Config:
    """The child runs elsewhere: give it absolute dataset paths (declared: the hash holds the absolute path, as it did)."""
    d = cfg.dataset
    if d.path:
        return cfg.replace("dataset.path", str(resolve_path(cfg, d.path).resolve()))
    return cfg
