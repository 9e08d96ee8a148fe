"""The package's shape, read from the source with `ast` (nothing is imported): no import circles,
and no stage importing a later one. The pipeline is
    facts -> checks -> profiles -> install -> runfolder -> record -> config -> selftest | train -> plan -> launch
    -> exec | bench -> sweep | slurm | tune -> reproduce -> commands (cli)
with the shared helpers (errors, redact, console, resources, fsutil)
below every stage. config (train.yaml read and checked, no torch) sits below train and plan, which
both read it. launch (the parent side of a run: the launcher, the child's command line, spawning,
the batch probe's decision) sits above plan, whose `Plan` it takes, and above train, whose child it
starts; exec (torchrun's command line, a child that dies with envkit's process), bench, sweep and
the commands start processes through it, so each ranks above it. Inside train/: run -> data | recovery | watching -> user_code.
An import inside a function counts too: a late import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "envkit"  # tests/project/ -> the repository

STAGE_ORDER = {
    # stage: rank; a module may import its own stage and any lower rank
    "base": 0, "facts": 1, "checks": 2, "profiles": 3, "install": 4, "runfolder": 4.4, "record": 4.5, "config": 4.7, "selftest": 5, "train": 5,
    "plan": 6, "launch": 6.5, "exec": 7, "bench": 7, "sweep": 8, "slurm": 8, "tune": 8, "reproduce": 8.5, "commands": 9, "cli": 10,
}
BASE = {"errors", "redact", "console", "resources", "fsutil", "__init__", "data", "track"}
BASE_MODULES = {"envkit.runfolder.names"}  # the run folder's file names: spelt once, below every stage
RUN_FOLDER_FILES = {"config.json", "environment.json", "summary.json", "heartbeat.json", "metrics.jsonl", "record.json",
                    "record.seal", "reproductions.json"}
TRAIN_ORDER = {"user_code": 0, "data": 1, "recovery": 1, "watching": 1, "run": 2}


def module_files(package: Path) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the envkit modules it imports (a `from pkg import name` of a submodule counts as
    that submodule; of a name, as pkg)."""
    mods = module_files(package)

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps |= {known(a.name) for a in node.names if a.name.split(".")[0] == "envkit"}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "envkit":
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    deps.add(sub if sub in mods else known(target))
        deps.discard(None)
        deps.discard(mod)
        graph[mod] = deps
    return graph


def stage_of(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1 or parts[1] in BASE or mod in BASE_MODULES:
        return "base"
    if parts[1] == "__main__":
        return "cli"
    return parts[1]


def train_room(mod: str) -> str | None:
    parts = mod.split(".")
    if len(parts) >= 3 and parts[1] == "train":
        return parts[2]
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def backward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(graph.items()):
        for dep in sorted(deps):
            a, b = stage_of(mod), stage_of(dep)
            if a != b and STAGE_ORDER[b] >= STAGE_ORDER[a]:
                bad.append(f"{mod} ({a}) imports {dep} ({b})")
            ra, rb = train_room(mod), train_room(dep)
            if ra and rb and ra != rb and TRAIN_ORDER.get(rb, 9) >= TRAIN_ORDER.get(ra, 9):
                bad.append(f"{mod} (train/{ra}) imports {dep} (train/{rb})")
    return bad


def test_the_package_has_no_import_circle():
    assert cycles(import_graph()) == []


def test_no_stage_imports_a_later_one():
    assert backward_imports(import_graph()) == []


def test_every_stage_is_known():
    """A new top-level package must be placed in the pipeline, not silently allowed."""
    unknown = {stage_of(m) for m in import_graph()} - set(STAGE_ORDER)
    assert unknown == set()


def test_train_is_in_rooms_and_no_file_is_long():
    train = PACKAGE / "train"
    rooms = {p.name for p in train.iterdir() if (p / "__init__.py").is_file()}
    assert rooms == {"run", "data", "recovery", "watching"}
    loose = sorted(p.name for p in train.glob("*.py") if p.name not in ("__init__.py", "user_code.py"))
    assert loose == []
    long = {str(p.relative_to(PACKAGE)): n for p in train.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


# The checks above must be able to fail: each is run once against a made-up package that breaks it.

def _write(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "envkit"
    for name, text in files.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_a_circle_through_late_imports_is_found(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "train/__init__.py": "",
        "train/run/__init__.py": "",
        "train/run/config.py": "def f():\n    from envkit.train.data.tokens import t\n",
        "train/data/__init__.py": "",
        "train/data/tokens.py": "from ..run import config\n",
    })
    assert cycles(import_graph(pkg)) == [["envkit.train.data.tokens", "envkit.train.run.config"]]


@pytest.mark.parametrize("importer, imported", [
    ("install/setup/flow.py", "from envkit.tune.session import run_tune"),
    ("checks/recommend.py", "from envkit.profiles import files"),
    ("train/data/datasets.py", "from envkit.train.run.config import Config"),
    ("config/config.py", "from envkit.train.data.tokens import files"),
    ("config/schema.py", "from envkit.plan.make import Config"),
])
def test_an_import_from_an_earlier_stage_to_a_later_one_is_found(tmp_path, importer, imported):
    files = {"__init__.py": "", importer: f"def f():\n    {imported}\n"}
    target = imported.split()[1].replace(".", "/") + ".py"
    files[target.removeprefix("envkit/")] = "run_tune = Config = files = 1\n"
    for folder in {str(Path(n).parent) for n in list(files)}:
        while folder not in (".", ""):
            files.setdefault(f"{folder}/__init__.py", "")
            folder = str(Path(folder).parent)
    pkg = _write(tmp_path, files)
    assert len(backward_imports(import_graph(pkg))) == 1


def long_functions(folder: Path, limit: int) -> list[str]:
    """`file:function (lines)` for every function in folder/*.py longer than `limit` lines."""
    out = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                out.append(f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1})")
    return out


def test_the_run_room_has_no_function_over_80_lines():
    """envkit/train/run/ is read to follow one training step: no function there outgrows a screen."""
    assert long_functions(PACKAGE / "train" / "run", 80) == []


def test_commands_parse_options_and_render_results():
    """envkit/commands/ turns options into a stage's call and renders what came back: what a command
    decides belongs to a stage (a run's to envkit/plan/), so no function there outgrows 60 lines."""
    assert long_functions(PACKAGE / "commands", 60) == []


def test_a_long_function_is_found(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 80 + "\ndef g():\n    pass\n")
    assert long_functions(tmp_path, 80) == ["m.py:f (81)"]


def test_a_run_folders_file_names_are_spelt_in_one_module():
    """Every module names summary.json and the rest through envkit/runfolder/names.py (docstrings and
    comments may mention them): one place to read what a run folder holds, and no reader that
    spells one of its own."""
    spelt = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "runfolder":
            continue
        tree = ast.parse(path.read_text(), str(path))
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef,
                ast.AsyncFunctionDef)) and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        spelt += [f"{path.relative_to(PACKAGE)}:{n.lineno} {n.value}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value in RUN_FOLDER_FILES and id(n) not in docs]
    assert spelt == []


def test_the_package_root_holds_at_most_seven_modules():
    """Beside __init__ and __main__: the command table, the user's API (track) and the helpers below
    every stage. A new one belongs in a package (or in one of these, when it is one of their jobs)."""
    root = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(root) <= 7, root


def test_run_folder_json_is_read_by_runfolders_one_reader():
    """One bounded JSON reader (runfolder/bounded.py: read_json, and read_json_lenient for the files a
    live run is still writing): no other module defines its own."""
    own = []
    for mod, path in module_files(PACKAGE).items():
        if mod.startswith("envkit.runfolder"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lstrip("_").startswith("read_json"):
                own.append(f"{mod}.{node.name}")
    assert own == []


def test_no_module_outside_runfolder_joins_a_run_folders_file_names():
    """A run folder's files are RunFolder's properties (runfolder/folder.py): no other module joins
    `run_dir / names.X` or a file name of a run folder spelt out, and none reads a run folder's JSON
    with anything but runfolder's reader."""
    from envkit.runfolder import names

    spelt = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str) and "." in v} - {names.LOCK}  # any project's lock too
    joins = []
    for mod, path in module_files(PACKAGE).items():
        if mod.startswith("envkit.runfolder"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if "/ names." in code or any(f'/ "{name}"' in code for name in spelt) or "read_json_lenient" in code:
                joins.append(f"{mod}:{n}: {line.strip()}")
    assert joins == []


def test_the_dataset_builders_take_the_path_the_plan_made_absolute():
    """plan/resolve.py makes dataset.path absolute before a run starts: nothing in train/ resolves it again."""
    graph = import_graph()
    assert sorted(m for m, deps in graph.items() if m.startswith("envkit.train.") and "envkit.config.paths" in deps) == []


def test_envkits_cache_folder_is_chosen_in_one_place():
    """ENVKIT_CACHE_DIR, XDG_CACHE_HOME and macOS's folder are read by fsutil.cache_dir alone: a second
    reading put the caches of exec, the child's entry and setup's lock under ~/.cache on a Mac."""
    spelt = [mod for mod, path in module_files(PACKAGE).items()
             if mod != "envkit.fsutil" and ('"ENVKIT_CACHE_DIR"' in path.read_text() or '".cache"' in path.read_text())]
    assert spelt == []


def test_every_status_the_trainer_writes_is_a_runstatus():
    """One status set: the trainer's Literal (TrainStatus) is a subset of RunStatus, which `runs`,
    `monitor` and `reproduce` read."""
    import typing

    from envkit.runfolder.records import RunStatus, TrainStatus

    assert set(typing.get_args(TrainStatus)) <= {s.value for s in RunStatus}


def test_a_torch_build_is_a_torchbuild_not_a_bare_string():
    """A dataclass field holding a torch build is typed TorchBuild (facts/torch_build.py): what a build
    is, is asked of it (kind, cuda, rocm), never spelt as startswith("cu") again."""
    bare = []
    for mod, path in module_files(PACKAGE).items():
        text = path.read_text()
        bare += [f"{mod}: {line.strip()}" for line in text.splitlines() if line.strip().startswith("backend: str")]
        bare += [f"{mod}: {line.strip()}" for line in text.splitlines()
                 if ('startswith("cu")' in line or 'startswith("rocm")' in line) and not line.lstrip().startswith(("#", '"'))
                 and mod != "envkit.facts.torch_build"]
    assert bare == []


def test_a_torch_build_says_what_it_is():
    from envkit.facts.torch_build import TorchBuild

    got = {t: (TorchBuild(t).kind, TorchBuild(t).cuda, TorchBuild(t).rocm) for t in ("cu128", "cu130", "rocm6.4", "xpu", "cpu", "pypi", "cuda")}
    assert got == {"cu128": ("cuda", "12.8", None), "cu130": ("cuda", "13.0", None), "rocm6.4": ("rocm", None, "6.4"),
                   "xpu": ("xpu", None, None), "cpu": ("cpu", None, None), "pypi": ("pypi", None, None), "cuda": ("other", None, None)}
    assert TorchBuild.of_version("2.13.0+cu130") == "cu130" and TorchBuild.of_version("2.13.0") is None
