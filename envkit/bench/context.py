"""What a bench or tune run measures with: the target interpreter, this machine's facts and
doctor checks, the profile, and the model's config (a quick-test template or the user's train.yaml)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from envkit.checks import run_checks, trainer_device
from envkit.checks.recommend import recommend_profile, shipped_recommendation
from envkit.config.config import load_config
from envkit.errors import EnvkitError
from envkit.facts import gather
from envkit.install.setup.managed import find_managed
from envkit.launch import auto_batch
from envkit.launch.torchrun import child_entry
from envkit.config.batch_auto import is_auto
from envkit.plan.resolve import absolutise_paths
from envkit.profiles import load_profile
from envkit.resources import shipped_dir

if TYPE_CHECKING:
    from envkit.facts.model import Facts
    from envkit.profiles.resolve import Profile
    from envkit.config.config import Config
    from envkit.facts.model import TrainDevice
    from envkit.config.schema import DeviceType

MODELS = ("gpt", "cnn", "mlp")


@dataclass
class BenchContext:
    python: str
    facts: Facts  # runtime probed in the target interpreter
    checks: dict  # doctor check id -> Check
    profile: Profile | None
    shipped_profile: str  # what doctor recommends, ignoring tuned profiles
    config: Config
    model: str  # gpt | cnn | mlp | the user's factory
    target: TrainDevice  # the device training uses here

    def plain_env(self) -> dict[str, str]:
        """os.environ without the profile's variables: what a run gets before the profile rung."""
        env = dict(os.environ)
        for key in (getattr(self.profile, "env", None) or {}):
            if key != "PYTHONUNBUFFERED":
                env.pop(key, None)
        return env

    def profile_env(self) -> dict[str, str]:
        return dict(getattr(self.profile, "env", None) or {})


def template_path(model: str) -> Path:
    return shipped_dir("templates") / "train" / f"{model}_quick_test.yaml"


def load_context(model: str | None, config_path: str | None, profile_name: str | None, python: str | None,
                 device: DeviceType = "auto") -> BenchContext:
    if config_path and model:
        raise EnvkitError("--model and --config exclude each other", where="--model",
                          fix="--model picks a built-in quick-test model; --config uses your train.yaml's model and data")
    managed = find_managed()
    py = python or (str(managed.python) if managed else None)
    facts = gather(runtime=True, gpu_detail=True, python=py)
    checks = {c.id: c for c in run_checks(facts)}
    torch_check = checks.get("torch")
    if torch_check is not None and torch_check.status == "fail":
        raise EnvkitError(f"no usable PyTorch: {torch_check.message} (doctor check 'torch')", where="environment",
                          fix=torch_check.fix or "`envkit setup` installs the right torch build")
    if profile_name is None:
        profile_name = managed.profile if managed and managed.profile else recommend_profile(facts)[0]
    profile = load_profile(profile_name, facts=facts)
    target = trainer_device(facts) if device == "auto" else device
    if target in ("cuda", "mps") and checks.get(target) is not None and checks[target].status != "pass":
        c = checks[target]
        raise EnvkitError(f"--device {target} cannot run here: {c.message} (doctor check '{target}')", where="--device",
                          fix=c.fix or "use --device auto")
    if config_path:
        cfg = load_config(config_path, profile=profile)
        name = cfg.model.type
    else:
        name = model or "gpt"
        if name not in MODELS:
            raise EnvkitError(f"unknown model {name!r}", where="--model", fix=f"one of {', '.join(MODELS)}, or --config train.yaml")
        cfg = load_config(template_path(name), profile=profile)
    cfg = _absolute_paths(cfg)
    ctx = BenchContext(py or _this_python(), facts, checks, profile, shipped_recommendation(facts)[0], cfg, name, target)
    decide_auto_batch(ctx)
    return ctx


def decide_auto_batch(ctx: BenchContext, echo=None) -> None:
    """training.batch_size auto: probed as `envkit run` probes it (on the target device), so every
    rung and candidate starts from the batch the trainer would use."""
    import sys

    if not is_auto(ctx.config):
        return
    say = echo or (lambda m: print(m, file=sys.stderr, flush=True))
    env = ctx.profile.child_environ(dict(os.environ)) if ctx.profile is not None else dict(os.environ)
    cfg, choice = auto_batch.resolve(ctx.config, python=ctx.python, env=env, child_entry=child_entry(),
                                     torch_settings=dict(getattr(ctx.profile, "torch", {}) or {}), device=ctx.target, echo=say)
    ctx.config = cast("Config", cfg)  # the Config it was given, its batch derived (resolve's annotation says object)
    say(choice.note)


def _absolute_paths(cfg):
    """The child runs elsewhere: give it absolute dataset paths (as envkit run does)."""
    return absolutise_paths(cfg)


def _this_python() -> str:
    import sys

    return sys.executable
