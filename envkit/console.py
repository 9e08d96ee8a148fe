"""Output: rich on a terminal, plain lines otherwise, JSON where a machine reads it."""

from __future__ import annotations

import json
import sys

from envkit.redact import redact


def is_tty(stream=None) -> bool:
    stream = stream or sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def print_json(data) -> None:
    """Every --json output: no URL in it keeps its credentials (envkit/redact.py)."""
    sys.stdout.write(json.dumps(redact(json.loads(json.dumps(data, default=str))), indent=2) + "\n")


MARKS = {"pass": ("✓", "green"), "warn": ("!", "yellow"), "fail": ("✗", "red"), "skip": ("-", "dim")}
PLAIN = {"pass": "[ok]  ", "warn": "[warn]", "fail": "[FAIL]", "skip": "[skip]"}


def print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A table: rich on a terminal, aligned plain lines otherwise."""
    if is_tty():
        from rich.table import Table

        t = Table(*header, title=title)
        for row in rows:
            t.add_row(*row)
        console().print(t)
    else:
        print(title)
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for row in (header, *rows):
            print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
