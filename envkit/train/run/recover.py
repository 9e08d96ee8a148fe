"""Recovery, in one place: the out-of-memory split and the NaN rollback (a resume is the
Checkpointer's, envkit/train/run/checkpointer.py, when the Trainer is built).

Each changes `TrainState` one way (a restore from a checkpoint, or a smaller micro-batch with more
accumulation) and then calls `Trainer.rewind`, which moves the data stream to the new position and
restarts the step clock. The non-finite check is made once per step, at the steps that sync with
the device anyway (a logged, evaluated or checkpointed step): `check_finite`.
What the faults are: envkit/train/recovery/faults.py; the hook that injects them for tests: envkit/train/recovery/injection.py.
"""

from __future__ import annotations

import math

import torch

from envkit.train.recovery import faults
from envkit.train.recovery.guards import NanGuard


def split_after_oom(tr, state, exc: BaseException, *, split: bool, metrics) -> None:
    """The step ran out of memory: a smaller micro-batch with more accumulation (the effective
    batch unchanged), and the step is redone. Re-raises anything else (and, with split=False, the
    out of memory itself: bench and tune measure one batch size)."""
    micro, accum, factor = faults.shrink_after_oom(exc, run_dir=tr.run_dir, step=state.step, bs=state.micro_batch,
                                                   accum=state.grad_accum, device_type=tr.device_type, world=tr.world,
                                                   log=tr.log, metrics=metrics, split=split)
    tr.optimizer.zero_grad(set_to_none=True)
    state.micro_batch, state.grad_accum, state.batches = micro, accum, state.batches * factor
    tr.rewind(state)


def check_finite(tr, *losses: float | None) -> bool:
    """False when any micro-batch loss since the last check, or any of `losses`, was NaN or inf.
    The step losses are summed on the device (`Trainer.loss_sum`): a NaN or inf in any of them
    leaves the sum non-finite, and finite cross-entropies cannot add up to an overflow."""
    return bool(torch.isfinite(tr.loss_sum)) and all(x is None or math.isfinite(x) for x in losses)


def rollback(tr, state, guard: NanGuard) -> None:
    """Back to the newest valid checkpoint with a lower learning rate, or TrainingStopped (the
    policy says stop, no checkpoint yet, or too many rollbacks)."""
    at = state.step
    found = tr.checkpointer.newest()
    factor = guard.on_nonfinite(at, found is not None)
    assert found is not None  # on_nonfinite raised TrainingStopped without a checkpoint to roll back to
    tr.checkpointer.restore(state, *found)
    state.lr_scale *= factor
    state.rollbacks = guard.rollbacks
    tr.log(f"warning: non-finite loss by step {at}: rolled back to {found[0].name} (step {state.step}), "
           f"learning rate x{state.lr_scale:g} (rollback {guard.rollbacks}/{guard.max_rollbacks})")
    tr.loss_sum.zero_()
    tr.rewind(state)
