"""What every dataset hands the trainer: a `DataBundle` (train and val sets, what the model needs to
know, the baseline loss), its batch order (`ResumableBatchSampler`), and the label entropy the readers share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

import torch
from torch.utils.data import Dataset

from envkit.errors import EnvkitError
from envkit.train.data.bad_files import SkippedFiles

DataKind = Literal["lm", "classify"]  # what a batch's targets are: the next tokens (lm), or one label per sample


@dataclass
class DataBundle:
    kind: DataKind
    train: Dataset
    val: Dataset
    info: dict  # for the model: vocab_size / num_classes / input_dim / in_channels
    baseline_loss: float | None = None  # unigram entropy (lm) or label entropy (classify), nats
    chance_accuracy: float | None = None
    tokens_per_sample: int = 1  # lm: block_size
    scorer: Callable | None = None  # scorer(model, device, autocast) -> {"accuracy": ...}
    check_batch: Callable | None = None  # check_batch(the DataLoader's batch) -> (x, y), in the trainer's process; raises EnvkitError
    skipped: SkippedFiles | None = None  # unreadable files skipped (dataset.on_bad_file: skip), for summary.json
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- sampling


class IndexBatch(list):
    """One batch's indices (a list, as a DataLoader's batch sampler yields) and the epoch they belong
    to: a dataset that augments draws per (seed, epoch, example) from it (cifar.py), the same in a
    DataLoader worker and on the device. None where batches are drawn with replacement."""

    def __init__(self, indices, epoch: int | None):
        super().__init__(indices)
        self.epoch = epoch


class ResumableBatchSampler:
    """Yields index lists forever. Epoch e is a permutation seeded by (seed, e); with several
    processes each takes its slice of the global batch. `start` = global batches already consumed."""

    MAX_PERMUTE = 1 << 24  # above this, draw with replacement per batch (no n-sized permutation)

    def __init__(self, n: int, batch_size: int, seed: int, start: int = 0, rank: int = 0, world: int = 1):
        if n < batch_size * world:
            raise EnvkitError(f"the training set has {n} examples, fewer than one batch of {batch_size * world}",
                              where="training.batch_size", fix="lower training.batch_size or use more data")
        self.n, self.bs, self.seed, self.start, self.rank, self.world = n, batch_size, seed, start, rank, world
        self.per_epoch = n // (batch_size * world)

    CHUNK = 256  # batches turned into Python lists at a time

    def __iter__(self):
        for epoch, rows in self.epochs():
            # a few batches at a time: listing a whole epoch at once held up the first batch (and each epoch's first)
            # 0.6 s on a 4M-sample token set, in the trainer's process (benchmarks/RESULTS.md, 2026-12-07)
            for start in range(0, len(rows), self.CHUNK):
                for row in rows[start:start + self.CHUNK].tolist():
                    yield IndexBatch(row, epoch)

    def epochs(self):
        """(epoch, this process's indices of each batch still to come in it, as a (batches, batch_size)
        tensor), from `start` on, forever: what data held on the device takes in one copy an epoch
        (on_device.py). With replacement (n > MAX_PERMUTE): (None, one batch) per batch."""
        b = self.start
        g = torch.Generator()
        gb = self.bs * self.world
        while True:
            if self.n > self.MAX_PERMUTE:
                g.manual_seed(self.seed * 1_000_003 + b)
                idx = torch.randint(self.n, (gb,), generator=g)
                yield None, idx[self.rank * self.bs:(self.rank + 1) * self.bs].view(1, -1)
                b += 1
                continue
            epoch, i = divmod(b, self.per_epoch)
            g.manual_seed(self.seed * 1_000_003 + epoch)
            perm = torch.randperm(self.n, generator=g)[:self.per_epoch * gb]
            yield epoch, perm.view(self.per_epoch, self.world, self.bs)[i:, self.rank]
            b = (epoch + 1) * self.per_epoch

    def epoch_of(self, batches: int) -> float:
        return batches / max(1, self.per_epoch)


def label_entropy(counts: torch.Tensor) -> float:
    p = counts.double() / counts.sum()
    p = p[p > 0]
    return float(-(p * p.log()).sum())
