"""Which interpreter the self-test runs in and with which profile settings: the managed
environment's Python and profile when there is one, else this Python and the recommended profile."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from envkit.errors import EnvkitError
from envkit.install.setup.managed import find_managed
from envkit.profiles import load_profile

# Used when no profile can be loaded (no profile files yet, or none given and none recommended).
DEFAULT_SETTINGS = {
    "torch": {"matmul_precision": "highest", "allow_tf32": False, "cudnn_benchmark": False},
    "dataloader": {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": None},
    "train": {"device": "auto", "precision": "auto", "compile": "auto"},
}


@dataclass
class Settings:
    profile: str | None
    env: dict[str, str]
    torch: dict
    dataloader: dict
    train: dict
    notes: list[str]


def load_settings(profile: str | None, python: str | None, base_env: dict[str, str] | None) -> tuple[Settings, str]:
    """The profile's settings and the interpreter to test. An explicit profile that does not load
    is an error; a recommended one that does not load falls back to defaults with a note."""
    notes: list[str] = []
    explicit = profile is not None
    managed = None
    if python is None or profile is None:
        try:
            managed = find_managed()
        except Exception:
            managed = None
    if python is None:
        python = str(managed.python) if managed else None
    if profile is None and managed and managed.profile:
        profile, explicit = managed.profile, True
    if profile is None:
        try:
            from envkit.facts import gather
            from envkit.checks.recommend import recommend_profile

            profile, warning = recommend_profile(gather(runtime=False, gpu_detail=False))
            if warning:
                notes.append(warning)
        except Exception as exc:  # facts are best effort: the defaults still test the device
            notes.append(f"could not pick a profile for this machine ({exc}): using defaults")
            profile = None
    env = dict(os.environ if base_env is None else base_env)
    settings = Settings(None, env, dict(DEFAULT_SETTINGS["torch"]), dict(DEFAULT_SETTINGS["dataloader"]),
                         dict(DEFAULT_SETTINGS["train"]), notes)
    if profile is not None:
        try:
            p = load_profile(profile)
        except EnvkitError:
            if explicit:
                raise
            notes.append(f"the recommended profile {profile!r} could not be loaded: using default settings")
        else:
            settings = Settings(p.name, p.child_environ(base=env), dict(p.torch), dict(p.dataloader),
                                dict(p.train), notes + list(getattr(p, "warnings", []) or []))
    return settings, python or _this_python()


def _this_python() -> str:
    return sys.executable
