"""The `sweep:` block of a train.yaml: which keys vary, every combination, what to call each run and
which runs form a group (the same combination, seeds apart). No torch."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass

from envkit.errors import EnvkitError
from envkit.config.coerce import coerce, field_for

SEED_KEY = "experiment.seed"


@dataclass(frozen=True)
class Combination:
    overrides: dict  # "section.key" -> value, in the grid's order

    def set_args(self) -> list[str]:
        """As `--set` texts, every value as JSON (which YAML reads back as it was: "yes" stays a string)."""
        return [f"{k}={json.dumps(v)}" for k, v in self.overrides.items()]

    @property
    def run_id(self) -> str:
        """A folder name that says the combination: `optimizer-lion_seed-0`."""
        parts = [f"{k.split('.')[-1]}-{_slug(v)}" for k, v in self.overrides.items()]
        return "_".join(parts) or "base"

    @property
    def group(self) -> str:
        """The combination without its seed: runs of one group differ only by seed."""
        rest = {k: v for k, v in self.overrides.items() if k != SEED_KEY}
        return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in rest.items()) or "all"


def _slug(value) -> str:
    return re.sub(r"[^\w.-]+", "-", str(value)).strip("-") or "x"


MAX_RUNS = 10_000  # a grid larger than this is refused before it is expanded (`envkit sweep --max-runs N` raises it)


def expand(grid: dict, source: str, max_runs: int = MAX_RUNS) -> list[Combination]:
    """Every combination, the first key varying slowest (as nested loops written in the grid's order).

    A key is a trainer key (`training.optimizer: [adamw, lion]`), or any other name whose values are
    mappings of keys set together (`recipe: [{training.optimizer: sgd, training.lr: 0.1}, ...]`):
    an optimizer's own learning rate, not every optimizer crossed with every rate."""
    if not grid:
        raise EnvkitError("no sweep.grid: nothing to sweep", where=f"{source}: sweep.grid",
                          fix="add e.g.  sweep: {grid: {training.optimizer: [adamw, lion], experiment.seed: [0, 1, 2]}}")
    count_runs(grid, source, max_runs)
    axes = []
    for key, values in grid.items():
        where = f"{source}: sweep.grid.{key}"
        if not isinstance(values, list) or not values:
            raise EnvkitError(f"expected a non-empty list of values, got {values!r}", where=where,
                              fix="e.g. training.optimizer: [adamw, lion]")
        linked = all(isinstance(v, dict) for v in values)
        options = [dict(v) for v in values] if linked else [{key: v} for v in values]
        for option in options:
            for k, v in option.items():
                _check_value(str(k), v, where if not linked else f"{where}[{options.index(option)}].{k}", source)
        if len({json.dumps(o, sort_keys=True, default=str) for o in options}) != len(options):
            raise EnvkitError("a value appears twice", where=where, fix="list each value once")
        axes.append(options)
    combos = []
    for picked in itertools.product(*axes):
        merged = {}
        for option in picked:
            merged.update(option)
        combos.append(Combination(merged))
    ids = [c.run_id for c in combos]
    if len(set(ids)) != len(ids):
        raise EnvkitError("two combinations would share a run folder name", where=f"{source}: sweep.grid",
                          fix="use values that differ in letters and digits, not only in punctuation, and set each key on one axis")
    return combos


def count_runs(grid: dict, source: str, max_runs: int = MAX_RUNS) -> int:
    """The number of runs the grid makes, counted from the lengths of its lists before anything is
    expanded (10^8 combinations are a product of small lists: refused here, in one line, at once)."""
    total = 1
    for values in grid.values():
        total *= len(values) if isinstance(values, list) and values else 1
    if total > max_runs:
        sizes = " x ".join(str(len(v)) for v in grid.values() if isinstance(v, list))
        raise EnvkitError(f"the grid makes {total:,} runs ({sizes}), above the limit of {max_runs:,}", where=f"{source}: sweep.grid",
                          fix=f"take values out of sweep.grid, or raise the limit with `envkit sweep --max-runs {total}`")
    return total


def _check_value(key: str, value, where: str, source: str) -> None:
    if key.startswith("sweep."):
        raise EnvkitError(f"{key!r} cannot be swept", where=where, fix="use a section.key of the trainer, e.g. training.lr")
    coerce(value, field_for(key, f"{source}: sweep.grid"), where)
