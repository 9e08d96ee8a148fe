"""`training.batch_size: auto`, owned here (no torch, nothing probed): whether a config asks for it
(the plan, the launcher, bench, sweep's packing, the trainer's log and reproduce all ask this), and
the number a resumed run keeps. The probing itself happens when the run starts
(envkit/launch/auto_batch.py)."""

from __future__ import annotations

from envkit.config.config import Config
from envkit.config.origin import Origin
from envkit.config.kinds import AUTO

KEY = "training.batch_size"


def is_auto(cfg) -> bool:
    return cfg.training.batch_size == AUTO


def declared_auto(values: dict) -> bool:
    """The same, of a config's declared values as a run folder keeps them (config.json's "values")."""
    return (values.get("training") or {}).get("batch_size") == AUTO


def keep_resumed(cfg, saved: dict):
    """Resuming a run whose batch was decided by a probe: keep that batch (its checkpoints and data
    position were written at it). cfg with the saved batch derived, or None when there is none.
    `saved` is the run's config.json, written by this envkit or one before the typed config."""
    batch = Config.from_resolved(saved).derived.get(KEY) if saved.get("values") else None
    if not isinstance(batch, int) or isinstance(batch, bool):
        return None
    return cfg.derive(KEY, batch, origin=Origin.parse(str((saved.get("origin") or {}).get(KEY, "auto"))))
