"""Optional experiment trackers (`logging.trackers: [tensorboard, wandb]`): the rows written to
metrics.jsonl, written again through those libraries when they are installed. metrics.jsonl stays
the source of truth; a tracker that is missing or fails is one line in the log, and training goes on.

W&B runs offline (files under the run folder, `wandb sync` uploads them later) unless the user is
logged in (WANDB_API_KEY, or an api.wandb.ai entry in ~/.netrc) or set WANDB_MODE themselves.
"""

from __future__ import annotations

import netrc
import os
from collections.abc import Callable
from pathlib import Path

INSTALL = {"tensorboard": "pip install tensorboard", "wandb": "pip install wandb"}


def _numeric(row: dict) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, run_dir: Path, config: dict):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, row: dict) -> None:
        step = row.get("step")
        for key, value in _numeric(row).items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


def wandb_logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbTracker:
    name = "wandb"

    def __init__(self, run_dir: Path, config: dict):
        import wandb  # pyright: ignore[reportMissingImports] - optional (envkit[wandb]), not installed where CI type-checks

        mode = os.environ.get("WANDB_MODE") or ("online" if wandb_logged_in() else "offline")
        self.mode = mode
        exp = config.get("experiment", {})
        self.run = wandb.init(project=exp.get("name") or "envkit", name=run_dir.name, dir=str(run_dir), mode=mode,
                              config=config, reinit=True)

    def log(self, row: dict) -> None:
        self.run.log(_numeric(row), step=row.get("step"))

    def close(self) -> None:
        self.run.finish()


FACTORIES = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker}


class Trackers:
    """The trackers that opened; `log(row)` feeds each, and one that fails is dropped with a line."""

    def __init__(self, names: list[str], run_dir: Path, config: dict, log: Callable[[str], None]):
        self.active: list = []
        self._log = log
        for name in dict.fromkeys(names or []):
            try:
                tracker = FACTORIES[name](Path(run_dir), config)
            except ImportError as exc:
                log(f"tracker {name}: not installed ({exc.name or exc}); {INSTALL[name]} to use it. "
                    "Training goes on; metrics.jsonl has every metric")
                continue
            except Exception as exc:  # noqa: BLE001 - a tracker must never stop a run
                log(f"tracker {name}: could not start ({type(exc).__name__}: {exc}); training goes on without it")
                continue
            log(f"tracker {name}: writing metrics" + (f" ({tracker.mode} mode)" if hasattr(tracker, "mode") else ""))
            self.active.append(tracker)

    def log(self, row: dict) -> None:
        for tracker in list(self.active):
            try:
                tracker.log(row)
            except Exception as exc:  # noqa: BLE001 - a tracker must never stop a run
                self._log(f"tracker {tracker.name}: failed ({type(exc).__name__}: {exc}); stopped writing to it")
                self.active.remove(tracker)

    def close(self) -> None:
        for tracker in self.active:
            try:
                tracker.close()
            except Exception as exc:  # noqa: BLE001 - the run is over; say so, do not fail it
                self._log(f"tracker {tracker.name}: closing failed ({type(exc).__name__}: {exc})")
        self.active = []
