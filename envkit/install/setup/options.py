"""setup's inputs, checked before anything touches the disk: --with, --venv, --installer, --index-url."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envkit.errors import EnvkitError
from envkit.install.act.execute import which_uv
from envkit.install.setup.managed import find_managed

if TYPE_CHECKING:
    from envkit.install.act.plan import Installer

COMPANIONS = ("torchvision", "torchaudio")
# Installed beside torch unless --no-numpy: torch warns at import without it ("Failed to initialize
# NumPy"), torch.from_numpy, DataLoader collation of arrays and nearly every training script need it.
DEFAULT_EXTRAS = ("numpy",)


@dataclass
class SetupOptions:
    """`envkit setup`'s options as plain values (the command line's names)."""
    profile: str = "auto"
    torch: str = "stable"
    with_: str = ""
    numpy: bool = True
    venv: str | None = None
    python: str | None = None
    installer: Installer | Literal["auto"] = "auto"
    index_url: str | None = None
    dry_run: bool = False
    yes: bool = False
    lock: str | None = None
    sync: bool = False  # --sync: a lock's install also removes what the lock does not name
    selftest: bool = True
    tune: str | None = None  # a budget ("5m"): run `envkit tune` after the install
    as_json: bool = False
    replay: str | None = None


def index_override(index_url: str | None) -> tuple[str | None, str]:
    """--index-url, else ENVKIT_INDEX_URL; a folder becomes an absolute path (the lock and the state
    name it from anywhere)."""
    override, why = index_url, "--index-url"
    if not override and os.environ.get("ENVKIT_INDEX_URL"):
        override, why = os.environ["ENVKIT_INDEX_URL"], "ENVKIT_INDEX_URL"
    if override and "://" not in override and not Path(override).is_dir():
        raise EnvkitError(f"--index-url {override!r} is neither a URL nor a folder of wheels", fix="pass e.g. https://mirror.example/simple")
    if override and "://" not in override:
        override = str(Path(override).resolve())
    return override, why


def parse_with(text: str) -> list[str]:
    names = [n.strip().lower() for n in (text or "").replace(" ", ",").split(",") if n.strip()]
    for n in names:
        if n not in COMPANIONS:
            raise EnvkitError(f"--with {n!r}: envkit pairs only {', '.join(COMPANIONS)} with torch",
                              fix="install other packages with pip once the environment exists")
    return list(dict.fromkeys(names))


def venv_path(opt: str | None, root: Path) -> Path:
    if opt == "active":
        active = os.environ.get("VIRTUAL_ENV")
        if not active:
            raise EnvkitError("--venv active, but no venv is active ($VIRTUAL_ENV is empty)", fix="activate one, or pass --venv PATH")
        path = Path(active)
    elif opt:
        path = Path(opt).expanduser()
    else:
        m = find_managed(Path.cwd())
        path = m.venv if m is not None and m.root.resolve() == root.resolve() else root / "venv"
    path = path.absolute()
    if path.exists() and not path.is_dir():
        raise EnvkitError("is a file, not a venv folder", where=str(path), fix="pass --venv with a folder path (it is created if missing)")
    if path.is_dir() and any(path.iterdir()) and not (path / "pyvenv.cfg").is_file():
        raise EnvkitError("is a folder that is not a venv (no pyvenv.cfg)", where=str(path),
                          fix="pass --venv with an empty or new folder, or an existing venv")
    return path


def venv_python_of(venv: Path) -> str:
    return str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))


def pick_installer(choice: Installer | Literal["auto"], replay: bool = False) -> Installer:
    if choice == "uv" and not which_uv():
        raise EnvkitError("--installer uv, but uv is neither on PATH nor beside envkit's Python",
                          fix="`pip install uv` (or https://docs.astral.sh/uv/), or use --installer pip")
    if choice == "auto":  # a recorded machine may not have uv: plan for pip, which every venv has
        return "uv" if which_uv() and not replay else "pip"
    return choice
