"""The thread-count variables (OMP_NUM_THREADS and friends, listed in data/gates.toml [env.threads]):
a value that is not a positive integer is a failure (the libraries ignore it, so the run does not
use the count the user meant, and envkit would record the bad text); more threads than the
machine's cores is a warning (they take turns on the cores: slower, not wrong)."""

from __future__ import annotations


def thread_problems(env: dict[str, str], names: list[str], cores: int | None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(failures, warnings) for the thread variables set in `env`: each a (problem, fix) pair naming
    the variable and its value."""
    failures, warnings = [], []
    for name in names:
        if name not in env:
            continue
        value = env[name]
        count = _positive_int(value)
        if count is None:
            failures.append((f"{name}={value!r} is not a positive integer: the libraries ignore it and use their default",
                             f"export {name}={cores or 1} (or unset it)"))
        elif cores and count > cores:
            warnings.append((f"{name}={value} is more than this machine's {cores} cores: the threads take turns on them",
                             f"export {name}={cores} (or unset it)"))
    return failures, warnings


def _positive_int(text: str) -> int | None:
    """The first level of an OpenMP list ("8" or "8,2": nested levels) as a positive integer."""
    first = text.strip().split(",")[0].strip()
    if not first.isascii() or not first.isdigit():
        return None
    count = int(first)
    return count if count > 0 else None
