"""Habits that keep the code easy to change, read from the source with `ast` and `tokenize`
(nothing is imported): no module in envkit/ over 500 lines, no function over 80, no import of
another module's underscored name (a shared helper gets a public name), every `# noqa` names
its rule and says why (the lint itself is `ruff check envkit tests`, configured in pyproject.toml),
and envkit's imports sit at the top of a module unless the module they import is slow (LAZY_OK)."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/project/ -> the repository (no conftest: benchmarks/bench_lazy_imports.py loads this file)
PACKAGE = ROOT / "envkit"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# Being restructured on another branch when these checks came in: the lead removes this set when
# that work is merged (each check below then holds for every file).
NOT_YET: set[str] = set()  # files allowed to break the rules while being restructured: none


def sources(*folders: Path) -> dict[str, str]:
    """repository-relative path -> text, for every .py file under the folders, NOT_YET left out."""
    out = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in NOT_YET:
                out[rel] = path.read_text()
    return out


def long_modules(files: dict[str, str]) -> dict[str, int]:
    return {rel: n for rel, text in files.items() if (n := len(text.splitlines())) > MAX_MODULE_LINES}


def long_functions(files: dict[str, str]) -> dict[str, int]:
    """"path:line name" -> its length, from the `def` line to its last line (decorators, such as a
    command's click options, are not counted; a nested function counts in its own right too)."""
    out = {}
    for rel, text in files.items():
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out[f"{rel}:{node.lineno} {node.name}"] = n
    return out


def underscored_imports(files: dict[str, str]) -> list[str]:
    """`from envkit.x import _name` (and from the self-test's probe kit, which the probe files
    import as `envkit_probe_kit`, and relative imports): a name one module keeps to itself, used
    by another."""
    out = []
    for rel, text in files.items():
        for node in ast.walk(ast.parse(text, rel)):
            if not isinstance(node, ast.ImportFrom):
                continue
            top = (node.module or "").split(".")[0]
            if not node.level and top not in ("envkit", "envkit_probe_kit"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{rel}:{node.lineno} from {'.' * node.level}{node.module or ''} import {alias.name}")
    return out


# Imports go at the top of a module, where a reader sees what it depends on. An envkit import
# inside a function is kept only where importing that module is measurably slow, and this is the
# one place that says where:
# - the module pulls in one of HEAVY at its top, itself or through the modules it imports there
#   (read from the source: `heavy_chain`; no envkit module is listed by hand for it), or
# - the pair is in LAZY_OK: importer -> module, with the module it would burden (a command's) and
#   why (`python benchmarks/bench_lazy_imports.py` measures what each pair costs there).
# Never for an import made in a thread, however slow: the run record's thread importing logging (through
# packaging.tags) while the trainer's process was forked broke logging's at-fork lock ("cannot release
# un-acquired lock" in the run's output, tests/runfolder/test_record.py).
HEAVY = frozenset({"torch", "torchvision", "numpy", "matplotlib", "PIL", "rich", "yaml", "requests", "wandb"})
LAZY_OK: dict[str, tuple[str, str]] = {
    # "importer -> imported module": (the module it would burden, why)
    "envkit/cli.py -> envkit.console": ("envkit.cli", "json and five more modules on every `envkit --help`, for a --json error only"),
    "envkit/commands/check.py -> envkit.console": ("envkit.commands.check", "json and five more modules, for --format json only"),
    "envkit/commands/check.py -> envkit.install.lock.drift": (
        "envkit.commands.check", "the lock reader (25 modules, hashlib, ~45 ms on every `envkit check`), for --lock only"),
    "envkit/commands/exec.py -> envkit.launch.launcher": (
        "envkit.commands.exec", "the launcher and its config readers (8 modules) on `exec --help` and `stop`, for a multi-process exec only"),
    "envkit/commands/exec.py -> envkit.slurm.jobs": (
        "envkit.commands.exec", "the Slurm job writer (submit, script, shlex) on `exec --help` and `stop`, for --slurm only"),
    "envkit/commands/exec.py -> envkit.slurm.cancel": (
        "envkit.commands.exec", "the Slurm job modules (6, shlex) on `exec --help`, for `envkit stop` only"),
    "envkit/commands/monitor.py -> envkit.train.watching.folder_status": (
        "envkit.commands.monitor", "a run's judging (owner lock, Slurm, hints: 15 modules, ~7 ms) on `monitor --help`, for a run's state only"),
    "envkit/commands/runs.py -> envkit.train.watching.folder_status": (
        "envkit.commands.runs", "a run's judging (owner lock, Slurm, hints: 37 modules, ~14 ms) on `runs --help` and where none is found"),
    "envkit/errors.py -> envkit.redact": (
        "envkit.errors", "re, urllib.parse and redact's compiled patterns on every `envkit --help`, for an error naming a URL only"),
    "envkit/exec/environment.py -> envkit.checks.recommend": (
        "envkit.commands.exec", "every doctor check (envkit/checks/__init__.py), on `envkit stop` and `exec --help` too"),
    "envkit/exec/start_files.py -> envkit.record.start": (
        "envkit.commands.exec", "the record writer (locks, packaging): `envkit stop` and `exec --help` write no record"),
    "envkit/exec/start.py -> envkit.exec.torch_check": ("envkit.commands.exec", "the lock reader, for a managed env's check only"),
    "envkit/launch/launcher.py -> envkit.checks.report": (
        "envkit.commands.exec", "the doctor report and its checks (16 modules, ~24 ms) on `exec --help` and `stop`, for a run's files only"),
    "envkit/launch/launcher.py -> envkit.record.start": (
        "envkit.commands.exec", "the record writer (67 modules, ~190 ms) on `exec --help` and `stop`, for a run's files only"),
    "envkit/launch/launcher.py -> envkit.train.recovery.injection": (
        "envkit.commands.exec", "~11 ms on `exec --help` and `stop`, for ENVKIT_TRAIN_INJECT only"),
    "envkit/plan/refusals.py -> envkit.checks": (
        "envkit.commands.exec", "every doctor check (14 modules, ~21 ms) on `exec --help` and `stop`, for a plan's refusals only"),
    "envkit/plan/refusals.py -> envkit.checks.gates": (
        "envkit.commands.exec", "every doctor check (envkit/checks/__init__.py), for a plan's refusals only"),
    "envkit/plan/resolve.py -> envkit.checks.recommend": (
        "envkit.commands.exec", "every doctor check (15 modules) on `exec --help` and `stop`, for a run given no profile only"),
    "envkit/plan/resolve.py -> envkit.facts": ("envkit.commands.train", "the probes (9 modules), for a run that gathers live facts only"),
    "envkit/plan/resolve.py -> envkit.install.setup.managed": (
        "envkit.commands.exec", "the managed-env finder and redact's patterns (~7 ms) on `exec --help` and `stop`, for a resolved run only"),
    "envkit/plan/resolve.py -> envkit.profiles": ("envkit.commands.sweep", "the profile reader (5 modules), for a run given a profile only"),
    "envkit/sweep/pack.py -> envkit.bench.runner": ("envkit.commands.sweep", "the bench runner (45 modules), for a packed sweep's probe only"),
    "envkit/sweep/pack.py -> envkit.bench.spec": ("envkit.commands.sweep", "the bench runner (45 modules), for a packed sweep's probe only"),
    "envkit/sweep/pack.py -> envkit.bench.stages": ("envkit.commands.sweep", "the bench runner (45 modules), for a packed sweep's probe only"),
    "envkit/sweep/pack.py -> envkit.checks": ("envkit.commands.sweep", "every doctor check (23 modules), for a packed sweep's probe only"),
    "envkit/profiles/files.py -> envkit.checks.gates": (
        "envkit.profiles", "every doctor check (envkit/checks/__init__.py), for a profile with [requires] only"),
    "envkit/profiles/resolve.py -> envkit.checks.gates": (
        "envkit.profiles", "every doctor check (envkit/checks/__init__.py), for a profile with [requires] only"),
    "envkit/profiles/resolve.py -> envkit.facts": ("envkit.profiles", "the probes, for a profile that reads a live fact only"),
    "envkit/selftest/settings.py -> envkit.checks.recommend": (
        "envkit.selftest", "every doctor check (envkit/checks/__init__.py), for a self-test given no profile only"),
    "envkit/selftest/settings.py -> envkit.facts": ("envkit.selftest", "the probes, for a self-test given no profile only"),
}
# Files whose late imports are counted, not judged yet, while another branch moves them: none.
LAZY_NOT_YET: tuple[str, ...] = ()


@functools.lru_cache(maxsize=None)
def parsed(rel: str, text: str) -> ast.Module:
    return ast.parse(text, rel)


def module_of(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(rel: str, node: ast.Import | ast.ImportFrom, mods: set[str]) -> tuple[set[str], set[str]]:
    """(the envkit modules an import runs, parent packages included; the other top-level names)."""
    def with_parents(name: str) -> set[str]:
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & mods

    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        return set().union(*(with_parents(n) for n in names)), {n.split(".")[0] for n in names if not n.startswith("envkit")}
    target = node.module or ""
    if node.level:
        here = module_of(rel).split(".")[:None if rel.endswith("__init__.py") else -1]
        target = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
    if target.split(".")[0] != "envkit":
        return set(), {target.split(".")[0]}
    return with_parents(target) | {f"{target}.{a.name}" for a in node.names} & mods, set()


def top_level_imports(body: list) -> list:
    """The imports a module runs when imported: not those in a function, nor under `if TYPE_CHECKING:`."""
    out = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out += top_level_imports(node.orelse)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                out += top_level_imports(getattr(node, field, None) or [])
    return out


def module_tops(files: dict[str, str]) -> dict[str, tuple[set[str], set[str]]]:
    """module -> (the envkit modules importing it runs first: its packages and what it imports at its
    top; the HEAVY ones among its other imports there)."""
    mods = {module_of(rel) for rel in files}
    out = {}
    for rel, text in files.items():
        parts = module_of(rel).split(".")
        deps, heavy = {".".join(parts[:i]) for i in range(1, len(parts))}, set()
        for node in top_level_imports(parsed(rel, text).body):
            envkit, other = imported_modules(rel, node, mods)
            deps |= envkit
            heavy |= other & HEAVY
        out[module_of(rel)] = (deps, heavy)
    return out


def heavy_chain(module: str, tops: dict[str, tuple[set[str], set[str]]]) -> list[str]:
    """How importing `module` reaches one of HEAVY through module tops: ["envkit.a", "envkit.b", "torch"], or []."""
    seen, queue = {module: ""}, [module]
    while queue:
        current = queue.pop(0)
        deps, heavy = tops[current]
        if heavy:
            chain = [min(heavy)]
            while current:
                chain.append(current)
                current = seen[current]
            return chain[::-1]
        for dep in sorted(deps - seen.keys()):
            seen[dep] = current
            queue.append(dep)
    return []


def late_envkit_imports(files: dict[str, str]) -> list[tuple[str, int, str, frozenset[str]]]:
    """(path, line, the statement, the envkit modules it imports) for each envkit import inside a function."""
    mods = {module_of(rel) for rel in files}
    out = []
    for rel, text in files.items():
        for func in ast.walk(parsed(rel, text)):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and (getattr(node, "level", 0) or imported_modules(rel, node, mods)[0]):
                    out.append((rel, node.lineno, ast.unparse(node), imported_modules(rel, node, mods)[0]))
    return sorted(set((r, n, t, frozenset(m)) for r, n, t, m in out))  # a nested function's import is walked twice


def needless_late_imports(files: dict[str, str], lazy_ok=None, not_yet=LAZY_NOT_YET) -> list[str]:
    """Each envkit import inside a function whose module is cheap to import (and not in LAZY_OK):
    it belongs at the top of its module."""
    lazy_ok = LAZY_OK if lazy_ok is None else lazy_ok
    tops = module_tops(files)
    out = []
    for rel, line, text, modules in late_envkit_imports(files):
        if rel.startswith(not_yet):
            continue
        targets = {m for m in modules if not any(o.startswith(m + ".") for o in modules)}  # the deepest: a package's parents run anyway
        if not any(heavy_chain(m, tops) or f"{rel} -> {m}" in lazy_ok for m in targets):
            out.append(f"{rel}:{line} {text}")
    return out


NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)", re.I)
GOOD_NOQA = re.compile(r": [A-Z]+[0-9]+(, [A-Z]+[0-9]+)* - \S")


def vague_noqas(files: dict[str, str]) -> list[str]:
    """Comments that silence the linter without naming the rule and the reason
    ("noqa: F401 - re-exported as config's public face" is the shape)."""
    out = []
    for rel, text in files.items():
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            m = NOQA.search(tok.string) if tok.type == tokenize.COMMENT else None
            if m and not GOOD_NOQA.match(m.group("rest")):
                out.append(f"{rel}:{tok.start[0]} {tok.string}")
    return out


def test_no_module_in_envkit_is_over_500_lines():
    assert long_modules(sources(PACKAGE)) == {}


def test_no_function_in_envkit_is_over_80_lines():
    assert long_functions(sources(PACKAGE)) == {}


def test_no_module_in_envkit_imports_another_modules_underscored_name():
    assert underscored_imports(sources(PACKAGE)) == []


def test_every_noqa_names_its_rule_and_gives_a_reason():
    assert vague_noqas(sources(PACKAGE, ROOT / "tests")) == []


def test_envkit_imports_sit_at_the_top_unless_the_module_is_slow():
    """A function-local envkit import of a cheap module: move it to the top of its module (or, if
    importing it there is measurably slow for a command that does not need it, add the pair to
    LAZY_OK with that command and the cost, measured by benchmarks/bench_lazy_imports.py)."""
    assert needless_late_imports(sources(PACKAGE)) == []


def test_every_lazy_ok_pair_is_still_a_late_import_of_a_cheap_module():
    """LAZY_OK says why an import is late: a pair whose import moved to the top, or whose module
    became slow on its own (HEAVY), is taken out."""
    files = sources(PACKAGE)
    late = {f"{rel} -> {m}" for rel, _line, _text, modules in late_envkit_imports(files) for m in modules}
    assert sorted(pair for pair in LAZY_OK if pair not in late) == []
    tops = module_tops(files)
    assert sorted(pair for pair in LAZY_OK if heavy_chain(pair.split(" -> ")[1], tops)) == []


def test_the_checks_see_what_they_are_for():
    """Each check finds the thing it forbids in a made-up module (so an empty answer above means
    the code is clean, not that the check is blind)."""
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    made_up = {
        "envkit/made_up.py": (f"from envkit.profiles.expr import _render, evaluate\nfrom .files import _File\n"
                              f"import os  # noqa\nimport re  # noqa: F401\nimport sys  # noqa: F401 - kept for the doctest\n"
                              f"def short():\n    pass\n\ndef long():\n{body}\n" + "\n" * MAX_MODULE_LINES),
    }
    assert long_modules(made_up) == {"envkit/made_up.py": MAX_MODULE_LINES + MAX_FUNCTION_LINES + 9}
    assert long_functions(made_up) == {"envkit/made_up.py:9 long": MAX_FUNCTION_LINES + 1}
    assert underscored_imports(made_up) == ["envkit/made_up.py:1 from envkit.profiles.expr import _render",
                                            "envkit/made_up.py:2 from .files import _File"]
    assert vague_noqas(made_up) == ["envkit/made_up.py:3 # noqa", "envkit/made_up.py:4 # noqa: F401"]
    package = {
        "envkit/__init__.py": "",
        "envkit/cheap.py": "import json\n",
        "envkit/plot.py": "from envkit import cheap\nif TYPE_CHECKING:\n    import torch\n",
        "envkit/trainer.py": "import os\nfrom . import plot\ntry:\n    import torch\nexcept ImportError:\n    torch = None\n",
        "envkit/run.py": "from envkit.trainer import os\n",
        "envkit/gpu/__init__.py": "import torch\n",
        "envkit/gpu/names.py": "",
        "envkit/uses.py": ("def a():\n    from envkit.cheap import json\n\ndef b():\n    from . import run\n\n"
                           "def c():\n    from envkit.plot import cheap\n\ndef d():\n    import envkit.cheap\n"),
    }
    assert heavy_chain("envkit.run", module_tops(package)) == ["envkit.run", "envkit.trainer", "torch"]
    assert heavy_chain("envkit.plot", module_tops(package)) == []
    assert heavy_chain("envkit.gpu.names", module_tops(package)) == ["envkit.gpu.names", "envkit.gpu", "torch"]
    assert needless_late_imports(package, lazy_ok={}, not_yet=()) == [
        "envkit/uses.py:2 from envkit.cheap import json", "envkit/uses.py:8 from envkit.plot import cheap",
        "envkit/uses.py:11 import envkit.cheap"]
    assert needless_late_imports(package, lazy_ok={"envkit/uses.py -> envkit.plot": ("", "")}, not_yet=("envkit/uses",)) == []
