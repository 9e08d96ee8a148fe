"""Where a dataset path in train.yaml points (no torch: the config check uses it too)."""

from __future__ import annotations

from pathlib import Path

from envkit.runfolder import names


def resolve_path(cfg, p: str) -> Path:
    """Relative dataset paths are relative to the YAML file's folder, then the working directory."""
    path = Path(p).expanduser()
    if path.is_absolute():
        return path
    if cfg.source and cfg.source not in ("<defaults>", names.CONFIG):
        beside = Path(cfg.source).resolve().parent / path
        if beside.exists():
            return beside
    return Path.cwd() / path
