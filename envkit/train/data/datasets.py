"""Datasets: synthetic (arithmetic for gpt, a known teacher for mlp, class images for cnn), text
(file or folder, char or byte level), npz, tokens (nanoGPT's train.bin/val.bin: envkit/train/data/tokens.py),
cifar10/cifar100 (binary folders: data/cifar.py), imagefolder (Pillow: data/imagefolder.py), or a user factory. Nothing downloads.

Every dataset is map-style and every batch order comes from `ResumableBatchSampler`, a pure
function of (seed, batches consumed): the data position in a checkpoint is one integer, and a
resumed run sees exactly the batches the uninterrupted run would have seen.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.utils.data import Dataset

from envkit.errors import EnvkitError
from envkit.train.data.bundle import DataBundle, label_entropy
from envkit.train.data.cifar import cifar
from envkit.train.data.imagefolder import imagefolder
from envkit.train.data.tokens import tokens
from envkit.train.user_code import accepted_args, import_factory
from envkit.config.schema import TextLevel

ARITH_VOCAB = "0123456789+=\n"


# ---------------------------------------------------------------- datasets


class TokenWindows(Dataset):
    """x = tokens[s:s+T], y = tokens[s+1:s+T+1] with s = i*stride."""

    def __init__(self, tokens: torch.Tensor, block: int, stride: int = 1):
        self.tokens, self.block, self.stride = tokens, block, stride
        self.n = max(0, (len(tokens) - block - 1) // stride + 1)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        s = i * self.stride
        chunk = self.tokens[s:s + self.block + 1]
        return chunk[:-1], chunk[1:]


class TensorPairs(Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    # -- the batch, wherever the tensors are (host memory, or the training device: on_device.py)
    @property
    def nbytes(self) -> int:
        return self.x.nbytes + self.y.nbytes

    def to(self, device) -> "TensorPairs":
        return TensorPairs(self.x.to(device), self.y.to(device))

    def batch(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        return self.take(self.plan(torch.as_tensor(indices, dtype=torch.long).view(1, -1), None)[0])

    def plan(self, rows: torch.Tensor, epoch: int | None) -> torch.Tensor:
        """(batches, 1, batch): the indices of many batches on the tensors' device, in one copy."""
        return rows.unsqueeze(1).to(self.x.device, non_blocking=True)

    def take(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[p[0]], self.y[p[0]]


class ClassImages(Dataset):
    """Class prototypes (smooth random patterns), shifted, rescaled and noised per example; each
    example is generated from (seed, index), so nothing is held in memory."""

    def __init__(self, protos: torch.Tensor, n: int, seed: int, noise: float, offset: int = 0):
        self.protos, self.n, self.seed, self.noise, self.offset = protos, n, seed, noise, offset

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 7_368_787 + self.offset + i)
        k = len(self.protos)
        y = int(torch.randint(k, (1,), generator=g))
        dx, dy = (int(v) for v in torch.randint(-3, 4, (2,), generator=g))
        scale = 0.7 + 0.6 * float(torch.rand((), generator=g))
        x = torch.roll(self.protos[y], shifts=(dy, dx), dims=(1, 2)) * scale
        x = x + self.noise * torch.randn(x.shape, generator=g)
        return x, y


# ---------------------------------------------------------------- builders


# dataset.type values envkit reads itself (anything else: a factory)
BUILTIN_DATASETS = ("synthetic", "text", "npz", "tokens", "cifar10", "cifar100", "imagefolder")


def build_data(cfg, *, seed: int) -> DataBundle:
    d = cfg.dataset
    kind = d.type
    if kind == "synthetic":
        return {"arithmetic": arithmetic, "teacher": teacher, "images": images}[d.task](cfg, seed)
    if kind == "text":
        return text(cfg)
    if kind == "npz":
        return npz(cfg)
    if kind == "tokens":
        return tokens(cfg)
    if kind in ("cifar10", "cifar100"):
        return cifar(cfg, seed, kind)
    if kind == "imagefolder":
        return imagefolder(cfg, seed)
    return from_factory(cfg, seed)


def arithmetic(cfg, seed: int) -> DataBundle:
    """Lines like `07+45=052\\n` (fixed width). Held-out operand pairs form the validation set, so
    exact-match accuracy measures addition learned, not memorised."""
    d, block = cfg.dataset, cfg.model.block_size
    nd = d.digits
    base = 10 ** nd
    stoi = {c: i for i, c in enumerate(ARITH_VOCAB)}
    line_len = 3 * nd + 4
    g = torch.Generator().manual_seed(seed)
    total = base * base
    n_val = max(1, int(total * d.val_fraction)) if total <= 1 << 22 else 4096
    if total <= 1 << 22:
        perm = torch.randperm(total, generator=g)
        val_pairs, train_pool = perm[:n_val], perm[n_val:]
        train_ids = train_pool[torch.randint(len(train_pool), (d.num_samples,), generator=g)]
    else:  # huge operand spaces: sample both sets; an overlap is vanishingly rare
        val_pairs = torch.randint(total, (n_val,), generator=g)
        train_ids = torch.randint(total, (d.num_samples,), generator=g)

    def encode(ids: torch.Tensor) -> torch.Tensor:
        a, b = ids // base, ids % base
        text = "".join(f"{int(x):0{nd}d}+{int(y):0{nd}d}={int(x + y):0{nd + 1}d}\n" for x, y in zip(a, b))
        return torch.tensor([stoi[c] for c in text], dtype=torch.long)

    train_tokens, val_tokens = encode(train_ids), encode(val_pairs)
    # windows start at line boundaries: an eval prompt at position 0 is what training saw
    train = TokenWindows(train_tokens, block, stride=line_len)
    val = TokenWindows(val_tokens, block, stride=line_len)
    if len(val) == 0:
        raise EnvkitError(f"model.block_size {block} is longer than the validation text ({len(val_tokens)} tokens)",
                          where="model.block_size", fix="lower model.block_size or raise dataset.val_fraction")
    counts = torch.bincount(train_tokens, minlength=len(ARITH_VOCAB))
    n_score = cfg.eval.accuracy_samples
    score_ids = val_pairs[:n_score]

    @torch.no_grad()
    def scorer(model, device, autocast):
        if len(score_ids) == 0:
            return {}
        lines = encode(score_ids).view(len(score_ids), line_len)
        prompt_len = 2 * nd + 2
        x = lines[:, :prompt_len].to(device)
        want = lines[:, prompt_len:prompt_len + nd + 1].to(device)
        for _ in range(nd + 1):
            with autocast:
                logits = model(x)
            x = torch.cat([x, logits[:, -1, :].argmax(-1, keepdim=True)], dim=1)
        got = x[:, prompt_len:]
        return {"accuracy": float((got == want).all(dim=1).float().mean())}

    return DataBundle("lm", train, val, {"vocab_size": len(ARITH_VOCAB), "block_size": block},
                      baseline_loss=label_entropy(counts), chance_accuracy=1.0 / (2 * base - 1),
                      tokens_per_sample=block, scorer=scorer,
                      notes=[f"arithmetic: {nd}-digit addition, {len(train_ids)} training lines, {n_val} held-out pairs"])


def teacher(cfg, seed: int) -> DataBundle:
    """x ~ N(0, I); y = argmax of a fixed random 2-layer network (the teacher)."""
    d = cfg.dataset
    g = torch.Generator().manual_seed(seed)
    dim, k = d.input_dim, d.num_classes
    w1 = torch.randn(dim, 64, generator=g) / math.sqrt(dim)
    w2 = torch.randn(64, k, generator=g) / math.sqrt(64)
    n_val = max(256, int(d.num_samples * d.val_fraction))
    x = torch.randn(d.num_samples + n_val, dim, generator=g)
    y = (torch.tanh(x @ w1) @ w2).argmax(1)
    n = d.num_samples
    counts = torch.bincount(y[:n], minlength=k)
    return DataBundle("classify", TensorPairs(x[:n], y[:n]), TensorPairs(x[n:], y[n:]), {"input_dim": dim, "num_classes": k},
                      baseline_loss=label_entropy(counts), chance_accuracy=float(counts.max()) / n,
                      notes=[f"teacher: {dim} features, {k} classes, {n} training examples"])


def images(cfg, seed: int) -> DataBundle:
    d = cfg.dataset
    g = torch.Generator().manual_seed(seed)
    k, s = d.num_classes, d.image_size
    coarse = torch.randn(k, 3, 4, 4, generator=g)
    protos = torch.nn.functional.interpolate(coarse, size=(s, s), mode="bilinear", align_corners=False)
    protos = (protos - protos.mean()) / protos.std()
    n_val = max(256, int(d.num_samples * d.val_fraction))
    train = ClassImages(protos, d.num_samples, seed, d.noise)
    val = ClassImages(protos, n_val, seed, d.noise, offset=10 ** 9)
    return DataBundle("classify", train, val, {"num_classes": k, "in_channels": 3}, baseline_loss=math.log(k),
                      chance_accuracy=1.0 / k, notes=[f"images: {k} classes of {s}x{s} patterns, noise {d.noise}"])


def _read_text(path: Path, level: TextLevel) -> bytes | str:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise EnvkitError("the text folder holds no files", where=f"dataset.path {path}")
    if level == "byte":
        return b"".join(p.read_bytes() for p in files)
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


def text(cfg) -> DataBundle:
    d, block = cfg.dataset, cfg.model.block_size
    path = Path(d.path)
    raw = _read_text(path, d.level)
    if isinstance(raw, bytes):  # dataset.level byte
        tokens, vocab = torch.tensor(list(raw), dtype=torch.long), 256
        itos = None
    else:
        chars = sorted(set(raw))
        stoi = {c: i for i, c in enumerate(chars)}
        tokens, vocab, itos = torch.tensor([stoi[c] for c in raw], dtype=torch.long), len(chars), "".join(chars)
    n_val = int(len(tokens) * d.val_fraction)
    train_t, val_t = tokens[:len(tokens) - n_val], tokens[len(tokens) - n_val:]
    if len(val_t) <= block + 1 or len(train_t) <= block + 1:
        raise EnvkitError(f"the text ({len(tokens)} tokens) is too short for block_size {block} with val_fraction {d.val_fraction}",
                          where=f"dataset.path {d.path}", fix="use more text or lower model.block_size")
    counts = torch.bincount(train_t, minlength=vocab)
    info = {"vocab_size": vocab, "block_size": block}
    if itos:
        info["itos"] = itos
    return DataBundle("lm", TokenWindows(train_t, block), TokenWindows(val_t, block, stride=max(1, block // 2)), info,
                      baseline_loss=label_entropy(counts), tokens_per_sample=block,
                      notes=[f"text: {len(tokens)} {d.level} tokens, vocab {vocab}"])


def npz(cfg) -> DataBundle:
    d = cfg.dataset
    try:
        import numpy as np
    except ImportError:
        raise EnvkitError("dataset type npz needs numpy in the training environment", where="dataset.type",
                          fix="pip install numpy")
    path = Path(d.path)
    try:
        arrays = dict(np.load(path, allow_pickle=False))
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError, OSError, zipfile.BadZipFile... for a bad file
        raise EnvkitError(f"cannot read npz: {exc}", where=f"dataset.path {d.path}")

    def pick(*names):
        for n in names:
            if n in arrays:
                return arrays[n]
        return None

    x, y = pick("x", "x_train", "X"), pick("y", "y_train", "Y")
    if x is None or y is None:
        raise EnvkitError(f"the npz needs arrays x and y (or x_train/y_train); it has {', '.join(arrays) or 'none'}",
                          where=f"dataset.path {d.path}")
    xv, yv = pick("x_val", "x_test"), pick("y_val", "y_test")

    def to_x(a):
        t = torch.from_numpy(np.ascontiguousarray(a))
        if t.dtype == torch.uint8:
            t = t.float() / 255.0
        t = t.float()
        if t.ndim == 4 and t.shape[-1] in (1, 3) and t.shape[1] not in (1, 3):
            t = t.permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
        return t

    X, Y = to_x(x), torch.from_numpy(np.asarray(y)).long().view(-1)
    if xv is None or yv is None:
        n_val = max(1, int(len(Y) * d.val_fraction))
        Xv, Yv, X, Y = X[-n_val:], Y[-n_val:], X[:-n_val], Y[:-n_val]
    else:
        Xv, Yv = to_x(xv), torch.from_numpy(np.asarray(yv)).long().view(-1)
    if X.ndim == 4:
        mean, std = X.mean(dim=(0, 2, 3), keepdim=True), X.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
        X, Xv = (X - mean[0]) / std[0], (Xv - mean[0]) / std[0]
    k = int(max(Y.max(), Yv.max())) + 1
    counts = torch.bincount(Y, minlength=k)
    info = {"num_classes": k, "input_dim": int(X[0].numel()), "in_channels": int(X.shape[1]) if X.ndim == 4 else 1}
    return DataBundle("classify", TensorPairs(X, Y), TensorPairs(Xv, Yv), info, baseline_loss=label_entropy(counts),
                      chance_accuracy=float(counts.max()) / len(Y), notes=[f"npz: {len(Y)} train, {len(Yv)} val, {k} classes"])


def from_factory(cfg, seed: int) -> DataBundle:
    """`factory(seed=..., block_size=..., **kwargs)` returns {"train": Dataset, "val": Dataset,
    "kind": "lm" | "classify", "info": {...}} (info feeds the model: vocab_size or num_classes...)."""
    d = cfg.dataset
    fn = import_factory(d.type, "dataset")
    extra = {k: v for k, v in {"seed": seed, "block_size": cfg.model.block_size}.items() if k in accepted_args(fn)}
    out = fn(**(d.kwargs or {}), **extra)
    if not isinstance(out, dict) or "train" not in out or "val" not in out:
        raise EnvkitError(f"{d.type} must return a dict with train and val datasets (and kind, info)", where="dataset.type")
    kind = out.get("kind", "classify")
    if kind not in ("lm", "classify"):
        raise EnvkitError(f"{d.type} returned kind {kind!r}; expected lm or classify", where="dataset.type")
    return DataBundle(kind, out["train"], out["val"], dict(out.get("info", {})),
                      tokens_per_sample=cfg.model.block_size if kind == "lm" else 1)
