"""A `tokens` dataset folder (nanoGPT's train.bin/val.bin, envkit/train/data/tokens.py reads it)
checked by its sizes alone: every file there, whole, at least one batch long, and a vocabulary that
fits the dtype. No torch or numpy: `envkit validate` and the config check run it before any run starts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.config.schema import TokenDtype

ITEMSIZE = {"uint16": 2, "uint32": 4}


@dataclass(frozen=True)
class TokenFolder:
    train: Path
    val: Path
    n_train: int
    n_val: int
    vocab_size: int
    dtype: TokenDtype
    vocab_from: str  # "dataset.vocab_size" or the meta.json path


def check_token_folder(folder: Path, dtype: TokenDtype, vocab_size: int | None, *, batch_tokens: int,
                       where_path: str = "dataset.path") -> TokenFolder:
    """Sizes and vocabulary of a tokens folder, or one EnvkitError naming the file at fault.
    `batch_tokens` = batch_size x (block_size + 1): each file must hold at least one batch."""
    folder = Path(folder)
    if not folder.exists():
        raise EnvkitError(f"dataset path {str(folder)!r} does not exist", where=where_path,
                          fix="point dataset.path at a folder holding train.bin and val.bin")
    if not folder.is_dir():
        raise EnvkitError(f"{folder} is a file; a tokens dataset is a folder holding train.bin and val.bin", where=where_path)
    size = ITEMSIZE[dtype]
    counts = {}
    for name in ("train.bin", "val.bin"):
        f = folder / name
        if not f.is_file():
            raise EnvkitError(f"{name} is missing (a tokens folder holds train.bin and val.bin)", where=str(f),
                              fix="write both with numpy: np.array(ids, dtype=np.uint16).tofile(path), as nanoGPT's prepare.py does")
        nbytes = f.stat().st_size
        if nbytes % size:
            other = "uint32" if dtype == "uint16" else "uint16"
            raise EnvkitError(f"{nbytes} bytes is not a multiple of {size} (dataset.dtype {dtype}): a truncated or differently typed file",
                              where=str(f), fix=f"rewrite the file, or set dataset.dtype: {other} if it was written that way")
        counts[name] = n = nbytes // size
        if n < batch_tokens:
            raise EnvkitError(f"holds {n} tokens, fewer than one batch (batch_size x (block_size + 1) = {batch_tokens})",
                              where=str(f), fix="use more data, or lower training.batch_size or model.block_size")
    if vocab_size is not None:
        vocab, source = vocab_size, "dataset.vocab_size"
    else:
        vocab, source = _meta_vocab(folder / "meta.json"), str(folder / "meta.json")
    limit = 1 << (8 * size)
    if vocab > limit:
        raise EnvkitError(f"vocabulary {vocab} does not fit in {dtype} (ids up to {limit - 1})", where=source,
                          fix="write the .bin files as uint32 and set dataset.dtype: uint32")
    return TokenFolder(folder / "train.bin", folder / "val.bin", counts["train.bin"], counts["val.bin"], vocab, dtype, source)


def _meta_vocab(meta: Path) -> int:
    pkl = meta.with_name("meta.pkl")
    fix = 'set dataset.vocab_size, or write {"vocab_size": N} to meta.json'
    if not meta.is_file():
        why = " (meta.pkl is never unpickled: a pickle can run code)" if pkl.exists() else ""
        raise EnvkitError(f"no vocabulary size: meta.json is missing{why}", where=str(meta), fix=fix)
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise EnvkitError(f"cannot read: {exc}", where=str(meta), fix=fix)
    v = data.get("vocab_size") if isinstance(data, dict) else None
    if isinstance(v, bool) or not isinstance(v, int) or v < 2:
        raise EnvkitError(f"vocab_size must be an integer of at least 2, got {v!r}", where=str(meta), fix=fix)
    return v
