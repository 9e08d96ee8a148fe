"""The `tokens` dataset: pre-tokenised text in the format nanoGPT and llm.c write.

    dataset: {type: tokens, path: DIR}      # DIR/train.bin, DIR/val.bin (DIR/meta.json optional)

Each .bin file is a flat array of token ids, `dtype: uint16` (default) or `uint32` (vocabularies
above 65,535), read through a memory map: a 20 GB file costs no memory. A training example is a
window of block_size + 1 tokens starting anywhere in train.bin; the order comes from envkit's
ResumableBatchSampler (a pure function of seed and batches consumed), so resume is exact.

The vocabulary size is `dataset.vocab_size`, else `DIR/meta.json`'s `{"vocab_size": N}`. A
nanoGPT `meta.pkl` is never unpickled (a pickle runs code). A bad folder is one EnvkitError naming
the file: checked by `envkit validate`/`run` before training (no torch or numpy needed for that),
and a token id >= the vocabulary is caught in the window that holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from envkit.config.token_files import check_token_folder
from envkit.errors import EnvkitError
from envkit.fsutil import atomic_write_bytes

if TYPE_CHECKING:
    from torch.utils.data import Dataset
    from envkit.config.schema import TokenDtype

# ---------------------------------------------------------------- reading (torch)


def open_tokens(path: Path, dtype: TokenDtype, n: int):
    """The file as a 1-D tensor over a private memory map (pages are read when touched, nothing is
    loaded whole, the file is never written). torch before 2.3 has no uint16/uint32: numpy's memmap."""
    import torch

    tdtype = getattr(torch, dtype, None)
    if tdtype is not None:
        return torch.from_file(str(path), shared=False, size=n, dtype=tdtype)
    try:
        import numpy as np
    except ImportError:
        raise EnvkitError(f"reading {dtype} token files with torch {torch.__version__} needs numpy", where="dataset.type",
                          fix="pip install numpy, or torch 2.3+")
    return np.memmap(path, dtype=dtype, mode="r", shape=(n,))


def write_tokens(path: Path, ids, dtype: TokenDtype = "uint16") -> None:
    """Write a 1-D tensor of ids as a .bin file (what nanoGPT's prepare.py writes with numpy)."""
    import ctypes

    import torch

    t = ids.to(getattr(torch, dtype)).contiguous()

    atomic_write_bytes(Path(path), ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))


def window(tokens, start: int, length: int):
    import torch

    part = tokens[start:start + length]
    return part.to(torch.int64) if isinstance(part, torch.Tensor) else torch.from_numpy(part.astype("int64"))


class TokenFile:
    """Map-style dataset of the windows of one .bin file: item i is (tokens[i:i+T], tokens[i+1:i+T+1]).

    The memory map opens lazily in each process (DataLoader workers included) and is never
    pickled: pickling it would copy the whole file into every worker."""

    def __init__(self, path: Path, dtype: TokenDtype, n_tokens: int, block: int, vocab: int, check: bool):
        self.dtype: TokenDtype = dtype
        self.path, self.n_tokens, self.block, self.vocab, self.check = Path(path), n_tokens, block, vocab, check
        self._mm = None

    def __len__(self) -> int:
        return self.n_tokens - self.block

    def __getstate__(self):
        return {**self.__dict__, "_mm": None}

    def __getitem__(self, i: int):
        if self._mm is None:
            self._mm = open_tokens(self.path, self.dtype, self.n_tokens)
        chunk = window(self._mm, i, self.block + 1)
        if self.check:
            check_ids(chunk, self.vocab, self.path)
        return chunk[:-1], chunk[1:]


def check_ids(t, vocab: int, path: Path) -> None:
    top = int(t.max())
    if top >= vocab:
        raise EnvkitError(f"a window holds token id {top}, not below the vocabulary size {vocab}", where=str(path),
                          fix="set dataset.vocab_size (or meta.json) to the tokenizer's size, or check dataset.dtype")


def tokens(cfg):
    """The DataBundle of a tokens folder (envkit/train/data/datasets.py dispatches here)."""
    from envkit.train.data.bundle import DataBundle, label_entropy

    import torch

    d, block = cfg.dataset, cfg.model.block_size
    bs = cfg.training.batch_size
    tf = check_token_folder(Path(d.path), d.dtype, d.vocab_size, batch_tokens=bs * (block + 1))
    # Training windows are read in DataLoader workers, where an exception arrives as a traceback:
    # they are checked in the trainer's process instead (check_batch); validation reads in-process.
    train = TokenFile(tf.train, tf.dtype, tf.n_train, block, tf.vocab_size, check=False)
    val = TokenFile(tf.val, tf.dtype, tf.n_val, block, tf.vocab_size, check=True)

    def check_batch(batch):
        x, y = batch
        check_ids(y, tf.vocab_size, tf.train)  # y holds every token of x but the first
        check_ids(x[:, :1], tf.vocab_size, tf.train)
        return batch

    sample = window(open_tokens(tf.train, tf.dtype, tf.n_train), 0, 1 << 20)  # unigram baseline from the first 1M tokens
    counts = torch.bincount(sample, minlength=tf.vocab_size)[: tf.vocab_size]
    # A map-style dataset by its __len__ and __getitem__ (what a DataLoader calls), not a Dataset
    # subclass: this module imports without torch (validate checks a folder with it).
    return DataBundle("lm", cast("Dataset", train), cast("Dataset", val), {"vocab_size": tf.vocab_size, "block_size": block},
                      baseline_loss=label_entropy(counts), tokens_per_sample=block, check_batch=check_batch,
                      notes=[f"tokens: train.bin {tf.n_train:,} and val.bin {tf.n_val:,} {tf.dtype} tokens (memory-mapped), "
                             f"vocabulary {tf.vocab_size} from {tf.vocab_from}"])
