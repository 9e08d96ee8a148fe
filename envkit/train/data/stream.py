"""The training batches from a data position: the batch order (`ResumableBatchSampler`), what reads
it (a DataLoader, or batches built where the data lives: on_device.py), and the copy to the device
with its fetch-ahead (`DeviceBatches`, prefetch.py).

`restart(micro_batch, position)` is the one way the position moves (a resume, an out-of-memory
split, a NaN rollback: `Trainer.rewind`): the order is rebuilt for the micro-batch and read from
the position, and a batch fetched ahead from the old one is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import cast

import torch

from envkit.config.config import Dataloader
from envkit.train.data import on_device
from envkit.train.data.bundle import DataBundle, ResumableBatchSampler
from envkit.train.data.prefetch import DeviceBatches


def batch_order(data: DataBundle, micro_batch: int, seed: int, rank: int, world: int) -> ResumableBatchSampler:
    """The training set's batch order at this micro-batch (EnvkitError when one batch is more than the set)."""
    # a DataBundle's sets are map-style, with a length (torch's Dataset does not declare __len__)
    return ResumableBatchSampler(len(cast(Sized, data.train)), micro_batch, seed, rank=rank, world=world)


class BatchStream:
    def __init__(self, data: DataBundle, loader: Dataloader, *, micro_batch: int, position: int, seed: int, rank: int, world: int,
                 device: torch.device, pin_memory: bool, on_device: bool, ahead: bool, next_batch: Callable):
        """Read from `position` (micro-batches of `micro_batch` consumed); `next_batch(iterator)` takes
        each batch from the reader (watching/watch.py times the wait)."""
        self.data, self.loader, self.seed, self.rank, self.world = data, loader, seed, rank, world
        self.pin_memory, self.on_device = pin_memory, on_device
        self.sampler = batch_order(data, micro_batch, seed, rank, world)
        self.device_batches = DeviceBatches(self._reader(position), device, pin_memory, next_batch, ahead=ahead)

    def take(self):
        """(x, y) on the device."""
        return self.device_batches.take()

    def prefetch(self) -> None:
        """Fetch the next batch now, where fetch-ahead is on (the device is busy with queued work)."""
        self.device_batches.prefetch()

    def restart(self, micro_batch: int, position: int) -> None:
        self.sampler = batch_order(self.data, micro_batch, self.seed, self.rank, self.world)
        self.device_batches.reset(self._reader(position))

    def _reader(self, start: int):
        loader, kw = self.loader, {}
        self.sampler.start = start
        if self.on_device:  # built where the data lives: no DataLoader (on_device.py)
            built = on_device.batches(self.data.train, self.sampler)
            return built if self.data.check_batch is None else map(self.data.check_batch, built)
        if loader.num_workers > 0:
            kw["persistent_workers"] = loader.persistent_workers
            if loader.prefetch_factor:
                kw["prefetch_factor"] = loader.prefetch_factor
        reader = torch.utils.data.DataLoader(self.data.train, batch_sampler=self.sampler, num_workers=loader.num_workers,
                                             pin_memory=self.pin_memory, generator=torch.Generator().manual_seed(self.seed), **kw)
        return iter(reader) if self.data.check_batch is None else map(self.data.check_batch, reader)
