"""The CIFAR-10 and CIFAR-100 *binary* versions (https://www.cs.toronto.edu/~kriz/cifar.html):
where the files are, whether they are whole, and their raw bytes. No torch: the config check uses it.

- CIFAR-10, `cifar-10-batches-bin/`: data_batch_1.bin .. data_batch_5.bin and test_batch.bin, each
  10,000 records of 1 label byte (0-9) then 3,072 pixel bytes (1,024 red, 1,024 green, 1,024 blue,
  rows of 32 from the top left).
- CIFAR-100, `cifar-100-binary/`: train.bin (50,000 records) and test.bin (10,000), each record a
  coarse label byte (0-19), a fine label byte (0-99), then the same 3,072 pixel bytes.

The "python version" of the archives holds pickles; unpickling runs whatever code the file names,
so envkit reads only the binary version and says so when it meets the other one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envkit.errors import EnvkitError
from envkit.config.schema import CifarLabels

PIXELS = 3 * 32 * 32
CifarKind = Literal["cifar10", "cifar100"]  # dataset.type of the CIFAR sets


@dataclass(frozen=True)
class CifarFormat:
    name: CifarKind
    folder: str  # the folder the official archive unpacks to
    archive: str
    train: tuple[str, ...]
    test: str
    label_bytes: int
    classes: dict[CifarLabels, tuple[int, int]]  # labels -> (byte offset in the record, number of classes)

    @property
    def record(self) -> int:
        return self.label_bytes + PIXELS


FORMATS: dict[CifarKind, CifarFormat] = {
    "cifar10": CifarFormat("cifar10", "cifar-10-batches-bin", "cifar-10-binary.tar.gz",
                           tuple(f"data_batch_{i}.bin" for i in range(1, 6)), "test_batch.bin", 1, {"fine": (0, 10)}),
    "cifar100": CifarFormat("cifar100", "cifar-100-binary", "cifar-100-binary.tar.gz",
                            ("train.bin",), "test.bin", 2, {"coarse": (0, 20), "fine": (1, 100)}),
}
DOWNLOAD = "https://www.cs.toronto.edu/~kriz/cifar.html"
_PICKLED = {"cifar10": ("data_batch_1", "batches.meta"), "cifar100": ("train", "meta")}


def locate(path: Path, kind: CifarKind, where: str) -> Path:
    """The folder holding the binary files: `path` itself or its official sub-folder."""
    fmt = FORMATS[kind]
    fix = f"download {fmt.archive} (the binary version) from {DOWNLOAD}, unpack it and point dataset.path at {fmt.folder}/"
    if not path.exists():
        raise EnvkitError(f"dataset path {path} does not exist", where=where, fix=fix)
    for folder in (path, path / fmt.folder):
        if folder.is_dir() and (folder / fmt.test).is_file():
            return folder
    for folder in (path, path / fmt.folder.replace("-bin", "-py").replace("-binary", "-python")):
        if folder.is_dir() and all((folder / n).is_file() for n in _PICKLED[kind]):
            raise EnvkitError(f"{folder} holds the Python (pickled) version of {kind}; envkit reads only the binary version, "
                              "because loading a pickle runs whatever code the file asks for", where=where, fix=fix)
    raise EnvkitError(f"no {fmt.test} in {path} or {path / fmt.folder}: not a {kind} binary folder", where=where, fix=fix)


def check_folder(path: Path, kind: CifarKind, where: str) -> Path:
    """Every file present and a whole number of records (sizes only: fast). Returns the folder."""
    fmt = FORMATS[kind]
    folder = locate(path, kind, where)
    for name in (*fmt.train, fmt.test):
        f = folder / name
        if not f.is_file():
            raise EnvkitError(f"{f} is missing", where=where, fix=f"unpack the whole {fmt.archive} from {DOWNLOAD}")
        _check_size(f, f.stat().st_size, fmt)
    return folder


def _check_size(f: Path, size: int, fmt: CifarFormat) -> None:
    if size == 0 or size % fmt.record:
        whole = size // fmt.record
        raise EnvkitError(f"{f}: {size} bytes is not a whole number of {fmt.record}-byte {fmt.name} records "
                          f"(record {whole} is cut short)", where=str(f),
                          fix=f"download {fmt.archive} again from {DOWNLOAD}: the file is truncated or not {fmt.name}")


def read_records(files: list[Path], kind: CifarKind) -> tuple[bytes, int]:
    """(the files' records, end to end; number of records). Every label byte is checked: one out of
    range is an EnvkitError naming the file and the record (counted from 0)."""
    fmt = FORMATS[kind]
    chunks, n = [], 0
    for f in files:
        raw = f.read_bytes()
        _check_size(f, len(raw), fmt)
        for name, (at, k) in fmt.classes.items():
            column = raw[at::fmt.record]
            worst = max(column)
            if worst >= k:
                raise EnvkitError(f"{f}, record {column.index(worst)}: {name} label {worst} is out of range 0-{k - 1}", where=str(f),
                                  fix=f"the file is corrupt or not {fmt.name}: download {fmt.archive} again from {DOWNLOAD}")
        chunks.append(raw)
        n += len(raw) // fmt.record
    return b"".join(chunks), n


def num_classes(kind: CifarKind, labels: CifarLabels) -> int:
    return FORMATS[kind].classes[labels][1]
