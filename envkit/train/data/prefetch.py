"""The next micro-batch, fetched and copied to the device one ahead.

Why: every `logging.every_steps` the trainer reads the loss (a device sync), so the GPU's queue is
empty; if the next batch is only read from the DataLoader and copied after that, the GPU waits for
the host each time. A plain nanoGPT loop fetches the next batch while the GPU runs the backward;
so does this, and the copy (non_blocking from pinned memory) is queued before the sync.

The position in the data stays exact: the trainer counts a batch when it is used, not when it is
fetched, and a fetched batch is dropped whenever the loader is rebuilt (resume, rollback, an
out-of-memory split), which rebuilds from that count. Fetching ahead is only done where it cannot
change what a batch contains: on an asynchronous device, with DataLoader workers or envkit's
own datasets (a user dataset read in the main process may draw from torch's global RNG, whose
state a checkpoint records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from envkit.facts.model import TrainDevice


class DeviceBatches:
    def __init__(self, batches, device: torch.device, non_blocking: bool, next_batch, ahead: bool):
        self.batches, self.device, self.non_blocking = batches, device, non_blocking
        self.next_batch, self.ahead = next_batch, ahead
        self.pending = None

    def reset(self, batches) -> None:
        """A rebuilt loader: the batch fetched from the old one is not used."""
        self.batches, self.pending = batches, None

    def take(self):
        """(x, y) on the device: the one fetched ahead, else the next from the loader."""
        batch, self.pending = self.pending, None
        return batch if batch is not None else self._fetch()

    def prefetch(self) -> None:
        """Fetch the next batch now (the GPU is busy with work already queued)."""
        if self.ahead and self.pending is None:
            self.pending = self._fetch()

    def _fetch(self):
        x, y = self.next_batch(self.batches)
        return x.to(self.device, non_blocking=self.non_blocking), y.to(self.device, non_blocking=self.non_blocking)


def want_fetch_ahead(setting, device_type: TrainDevice, num_workers: int, builtin_dataset: bool) -> bool:
    """dataloader.fetch_ahead: true/false as set; auto where it pays (an asynchronous device) and
    cannot change a batch (see above)."""
    if setting in (True, False):
        return setting
    return device_type in ("cuda", "mps") and (num_workers > 0 or builtin_dataset)
