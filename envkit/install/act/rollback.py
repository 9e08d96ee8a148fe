"""Put an environment back exactly as it was.

Before an install, every file of every installed distribution (from its RECORD) is hard-linked
into a backup folder inside the venv: instant, and no extra disk space. If the install or the
verification fails, or the user presses Ctrl-C, the distributions that changed or appeared are
removed (their RECORD files) and the old ones are linked back; the package set is then compared
with the one recorded before.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

from envkit.install.act.interp import probe


@dataclass
class Backup:
    root: Path  # backup folder
    before: dict[str, str]  # canonical name -> version
    files: dict[str, list[str]] = field(default_factory=dict)  # canonical name -> absolute paths

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _record_files(dist_path: str) -> list[Path]:
    """Absolute paths of a distribution's files, from RECORD (plus its .dist-info folder)."""
    info = Path(dist_path)
    site = info.parent
    out: list[Path] = []
    rec = info / "RECORD"
    if rec.is_file():
        with open(rec, newline="", encoding="utf-8", errors="replace") as fh:
            for row in csv.reader(fh):
                if row and row[0]:
                    out.append(Path(os.path.normpath(site / row[0])))
    if info.is_dir():
        out.extend(p for p in info.rglob("*") if p.is_file())
    return list(dict.fromkeys(out))


def take(python: str, root: Path) -> Backup:
    interpreter = probe(python)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    b = Backup(root=root, before=interpreter.installed)
    for name, d in interpreter.dists.items():
        if not d.get("path"):
            continue
        kept = []
        for f in _record_files(d["path"]):
            if not f.is_file():
                continue
            dest = root / str(f).lstrip(os.sep)
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(f, dest)
            except OSError:
                shutil.copy2(f, dest)
            kept.append(str(f))
        b.files[name] = kept
    return b


def _remove_dist(dist_path: str) -> None:
    dirs = set()
    for f in _record_files(dist_path):
        try:
            f.unlink()
            dirs.add(f.parent)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            pass
    shutil.rmtree(dist_path, ignore_errors=True)
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        _prune(d)


def _prune(d: Path) -> None:
    """Remove a folder left holding nothing but __pycache__ folders."""
    if not d.is_dir() or d.name in ("site-packages", "bin", "Scripts", "lib"):
        return
    for p in d.rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            return
    shutil.rmtree(d, ignore_errors=True)


def restore(python: str, backup: Backup) -> dict[str, tuple[str | None, str | None]]:
    """Put back the recorded set. Returns the remaining differences (empty when exact).
    Ctrl-C is ignored while restoring: stopping half-way would leave the mess this undoes."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    try:
        now = probe(python)
        for name, d in now.dists.items():
            if backup.before.get(name) != d["version"] and d.get("path"):
                _remove_dist(d["path"])
        now = probe(python)
        for name, version in backup.before.items():
            if now.installed.get(name) == version:
                continue
            for f in backup.files.get(name, []):
                src = backup.root / f.lstrip(os.sep)
                dest = Path(f)
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.exists():
                    dest.unlink()
                try:
                    os.link(src, dest)
                except OSError:
                    shutil.copy2(src, dest)
        after = probe(python).installed
        return {n: (backup.before.get(n), after.get(n)) for n in set(after) | set(backup.before)
                if backup.before.get(n) != after.get(n)}
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
