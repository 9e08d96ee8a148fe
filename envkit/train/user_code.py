"""The user's own code named in train.yaml (`model.type` / `dataset.type: package.module:factory`):
import it on purpose, and pass a factory only the arguments its signature accepts."""

from __future__ import annotations

import importlib
import inspect

from envkit.errors import EnvkitError


def import_factory(spec: str, what: str):
    """`package.module:attr` -> the attribute (the user's code, imported on purpose)."""
    module, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - report any import failure as one line
        raise EnvkitError(f"cannot import {module!r}: {type(exc).__name__}: {exc}", where=f"{what}.type",
                          fix="make the package importable (pip install -e . or PYTHONPATH) in the training environment")
    if not hasattr(mod, attr):
        raise EnvkitError(f"module {module!r} has no attribute {attr!r}", where=f"{what}.type")
    return getattr(mod, attr)


def accepted_args(fn) -> set:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set()
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return {"vocab_size", "num_classes", "input_dim", "in_channels", "block_size"}
    return set(params)
