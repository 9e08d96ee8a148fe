"""Where envkit's data lives: `profiles/` and `templates/` at the top of a source checkout,
or inside the installed wheel as `envkit._profiles` / `envkit._templates`."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_file(name: str) -> Path:
    """A file of envkit/data (gates, chips, driver tables)."""
    return _PACKAGE_DIR / "data" / name


def shipped_dir(kind: str) -> Path:
    """`kind` is "profiles" or "templates"."""
    installed = _PACKAGE_DIR / f"_{kind}"
    if installed.is_dir():
        return installed
    checkout = _PACKAGE_DIR.parent / kind
    if checkout.is_dir():
        return checkout
    try:  # an editable install maps envkit._<kind> onto the checkout's folder
        import importlib.resources as ir

        return Path(str(ir.files(f"envkit._{kind}")))
    except (ModuleNotFoundError, TypeError):
        return checkout


def load_toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib  # pyright: ignore[reportMissingImports] - tomli is installed on Python 3.10 only (its marker in pyproject)
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def user_dir() -> Path:
    """The user profile folder (ENVKIT_CONFIG_DIR/profiles, else the platform's config folder):
    tuned and personal profiles live here."""
    explicit = os.environ.get("ENVKIT_CONFIG_DIR")
    if explicit:
        return Path(explicit) / "profiles"
    import click

    return Path(click.get_app_dir("envkit")) / "profiles"
