"""Sharded checkpoints (training.parallel fsdp), written with torch.distributed.checkpoint (DCP).

A checkpoint is a folder, `checkpoints/step_XXXXXXXX.dcp/`:

    __0_0.distcp, __1_0.distcp, ...  each process's shards of the weights and optimizer state (DCP)
    .metadata                         where every shard of every tensor lies (DCP): what lets a run
                                      of M processes load what N wrote (resharded as it is read)
    envkit.pt                         counters, RNG, config hash, the writers' process count, and
                                      the sha256 of every file above; the same checksum trailer as
                                      a step_*.pt file

The same guarantees as a single-file checkpoint (envkit/train/run/checkpoint.py): every process
writes into `.step_XXXXXXXX.dcp.partial/`, each hashes the files it wrote, and rank 0 writes
envkit.pt last and renames the folder, so a folder with the final name is whole; a file that is
cut short or altered later fails its checksum and the previous checkpoint is used. The files are
loaded by DCP, which reads tensors only (no pickled code).

DCP needs every process to write into the same folder: with several nodes, the run folder must be
on a filesystem they share (as Slurm clusters' home and scratch folders are).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from envkit.fsutil import sha256_file
from envkit.train.run.verified_file import CorruptCheckpoint, verified_bytes, write_verified

SUFFIX = ".dcp"
META = "envkit.pt"


def partial_path(folder: Path, step: int) -> Path:
    return Path(folder) / f".step_{step:08d}{SUFFIX}.partial"


def save(folder: Path, model, optimizer, fields: dict, *, rank: int, world: int) -> Path:
    """Collective: every process calls it with the same step. Returns the checkpoint's folder."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    folder = Path(folder)
    final, tmp = folder / f"step_{fields['step']:08d}{SUFFIX}", partial_path(folder, fields["step"])
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a partial folder from a run killed while writing
        tmp.mkdir(parents=True)
    dist.barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(tmp))  # pyright: ignore[reportPrivateImportUsage] - public API, not in the package's __all__
    mine = {p.name: sha256_file(p) for p in tmp.iterdir() if p.name.startswith(f"__{rank}_")}
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        files = {name: digest for part in gathered for name, digest in part.items()}
        files.update({p.name: sha256_file(p) for p in tmp.iterdir() if p.name not in files and p.name != META})
        write_verified(tmp / META, {**fields, "world": world, "files": files})
        _fsync_dir(tmp)
        if final.exists():  # the same step written again (after a rollback): the new one replaces it whole
            aside = folder / f".{final.name}.old"
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(final, aside)
            os.replace(tmp, final)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(folder)
    dist.barrier()
    return final


def read_meta(path: Path) -> dict:
    """The checkpoint's fields, after every file's checksum matched; CorruptCheckpoint otherwise."""
    path = Path(path)
    meta = torch.load(_bytes_io(verified_bytes(path / META)), map_location="cpu", weights_only=True)
    missing = [k for k in ("step", "rng", "data", "config_hash", "world", "files") if k not in meta]
    if missing:
        raise ValueError(f"not an envkit sharded checkpoint (missing {', '.join(missing)})")
    for name, want in meta["files"].items():
        f = path / name
        if not f.is_file():
            raise CorruptCheckpoint(f"{name} is missing from the checkpoint folder")
        if sha256_file(f) != want:
            raise CorruptCheckpoint(f"{name}: checksum mismatch (the file was altered or cut short after it was written)")
    return {**meta, "format": "dcp"}


def load_into(path: Path, model, optimizer) -> None:
    """Weights and optimizer state from a sharded checkpoint into `model` and `optimizer`, whatever
    they are now: sharded over any number of processes, replicated (ddp), or one process."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optimizer": optim_sd}
    import warnings

    with warnings.catch_warnings():  # one process, no process group: DCP says it assumes so, which is the point
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process.*")
        dcp.load(state, checkpoint_id=str(path))  # pyright: ignore[reportPrivateImportUsage] - public API, not in the package's __all__
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def load_full_into(saved: dict, model, optimizer) -> None:
    """A single-file checkpoint (written by ddp or one process) into a sharded model: the full
    tensors are cut into this process's shards. The optimizer's state is keyed by parameter
    position in a step_*.pt file and by parameter name here: the positions follow the order the
    optimizer was built in, the same for one config."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    names = {id(p): n for n, p in model.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    saved_optim = saved["optimizer"]
    optim_sd = {"state": {order[i]: s for i, s in saved_optim["state"].items()},
                "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in saved_optim["param_groups"]]}
    set_state_dict(model, optimizer, model_state_dict=saved["model"], optim_state_dict=optim_sd,
                   options=StateDictOptions(full_state_dict=True))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _bytes_io(data: bytes):
    import io

    return io.BytesIO(data)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
