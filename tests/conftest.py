"""Shared fixtures: run the real CLI in a subprocess, find recorded snapshots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent  # the tests' data folders (snapshots/, locks/, old_runs/, device_samples/) sit here
SNAPSHOTS = TESTS / "snapshots"


def scratch_dir(prefix: str) -> str:
    """A folder for this test process's life (a module's shared cache, the empty config folder),
    removed when the process ends: each xdist worker makes its own, and none is left in /tmp."""
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


_EMPTY_CONFIG_DIR = scratch_dir("envkit-test-config-")

def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core. Two more (tried before) kept a 2-core machine at a load of 7.6:
    every torch import and compile took turns, and a loaded CI machine took 18 minutes; each worker
    trains with its share of the cores (below)."""
    return os.cpu_count() or 1


# Under pytest-xdist each worker trains with its share of the cores, as a user who runs two trainings
# at once would export it (and as envkit gives each torchrun process its share): two workers whose
# trainers each spun the profile's one-OpenMP-thread-per-core made a 35-second training take 208
# seconds on a 2-core machine. The exported value wins over the profile's (envkit/profiles/resolve.py).
# Inductor's compile workers too: with one core each, a compile with a pool of two worker processes
# (each importing torch) took 72 s against 55 s for tests/train/test_compile_cache.py alone.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS_PER_WORKER = str(max(1, (os.cpu_count() or 1) // WORKERS))
SHARE = {"OMP_NUM_THREADS": THREADS_PER_WORKER, "TORCHINDUCTOR_COMPILE_THREADS": THREADS_PER_WORKER}


def share_of_cores(env: dict) -> dict:
    """env with this worker's share of the cores (OpenMP threads, Inductor's compile workers) where unset."""
    if WORKERS > 1:
        for name, value in SHARE.items():
            if not env.get(name):
                env[name] = value
    return env


if WORKERS > 1:
    # Every process a test starts (`envkit exec`'s scripts, torchrun's, the tests' own helpers) gets the
    # share, not only the trainings started through envkit() below: the tests that check the profile's
    # own thread count unset it (env={"OMP_NUM_THREADS": None}).
    share_of_cores(os.environ)  # type: ignore[arg-type]
    import torch  # in-process training (bench and tune's children run in-process in a few tests) shares too

    torch.set_num_threads(int(THREADS_PER_WORKER))


# Python writes bytecode on a module's first import, as on a user's machine. This project's machines
# export PYTHONDONTWRITEBYTECODE=1, and every process of a venv a test builds without bytecode (uv's
# installs, PIP_COMPILE=0, pip --no-compile) compiled torch's sources again: `import torch` took
# 3.3 s of CPU there against 1.8 s with bytecode (doctor's bytecode check says the same to users).
# The tests of that check set the variable themselves.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def envkit(*args: str, env: dict | None = None, cwd: str | os.PathLike | None = None, timeout: float = 300,
           input: str | None = None, wrap: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run `python -m envkit ARGS` as a user would; stdout is not a TTY (plain output). `wrap`: a command
    that runs it (`unshare ...`, `setpriv ...`)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "ENVKIT_"))}
    full_env["PYTHONUNBUFFERED"] = "1"
    # A tuned profile in the developer's own user folder (envkit tune) must not change what tests see.
    full_env["ENVKIT_CONFIG_DIR"] = _EMPTY_CONFIG_DIR
    share_of_cores(full_env)
    for name, value in (env or {}).items():  # None unsets a variable
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    return subprocess.run([*wrap, sys.executable, "-m", "envkit", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout, input=input)


@pytest.fixture
def run_envkit():
    return envkit


def snapshot_path(name: str) -> Path:
    return SNAPSHOTS / f"{name}.json"


def load_snapshot(name: str) -> dict:
    return json.loads(snapshot_path(name).read_text())


def has_cuda() -> bool:
    try:
        import torch
    except Exception:
        return False
    return torch.cuda.is_available()


# The local package index and throw-away venvs of the setup tests (tests/localindex.py).
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from localindex import LocalIndex, build_all

    wheels = build_all(tmp_path_factory.mktemp("wheels"))
    with LocalIndex(wheels) as srv:
        yield srv


@pytest.fixture(scope="session")
def template_venv(tmp_path_factory):
    """One `python -m venv` (ensurepip: 4 s of CPU) per worker, not per module: 16 modules copy it. Never
    changed: tests copy it (`venv`) or only run its interpreter."""
    path = tmp_path_factory.mktemp("template") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path


@pytest.fixture
def venv(template_venv, tmp_path):
    """A fresh venv (a copy of one made once: ensurepip costs seconds)."""
    import shutil

    dest = tmp_path / "venv"
    shutil.copytree(template_venv, dest, symlinks=True)
    return dest


def default_sigint() -> None:
    """preexec_fn for a child a test will Ctrl-C: a suite started in the background by a shell
    without job control (`cmd &`) runs with SIGINT ignored, and a Python that starts with SIGINT
    ignored never raises KeyboardInterrupt. The child gets the default back, as in a terminal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


# The end-to-end files: each test trains, installs or schedules for real (seconds to a minute on 2
# cores). `pytest -m "not slow" -n auto` runs the rest in under two minutes; CI runs everything.
# Files measured with --durations (a file whose every test takes under a few seconds is not here).
# Named by their path under tests/; a name that matches no file stops the session (pytest_configure).
SLOW_FILES = frozenset({
    "train/test_train_run.py", "launch/test_slurm.py", "bench/test_bench_tune.py", "train/test_train_faults.py",
    "train/test_fsdp.py", "train/test_processes.py", "train/test_train_prefetch.py", "bench/test_sweep.py",
    "bench/test_sweep_pack.py", "runfolder/test_owner_exec_sweep.py", "runfolder/test_run_owner.py",
    "bench/test_bench_failures.py", "train/test_auto_batch.py", "train/test_train_tokens.py", "train/test_train_cifar.py",
    "train/test_bad_images.py", "launch/test_train_multinode.py", "train/test_checkpoint_keep.py",
    "runfolder/test_stop_without_start_time.py", "project/test_json_stdout.py", "bench/test_selftest.py",
    "train/test_device_watch.py", "config/test_bounded_input.py", "project/test_packaging.py", "install/test_pylock_real.py",
    # installs into fresh venvs from a local index (pip, uv), and envkit exec's supervised processes
    "install/test_setup.py", "install/test_setup_uv.py", "install/test_setup_guards.py", "install/test_builds.py",
    "install/test_install_failures.py", "install/test_pylock.py", "install/test_pylock_interop.py", "install/test_lock_project.py",
    "install/test_accel_install.py", "launch/test_exec.py", "project/test_secrets.py", "train/test_train_templates.py",
    "runfolder/test_reproduce.py", "runfolder/test_record.py", "runfolder/test_runfolder_attacks.py",
    "runfolder/test_runfolder_fuzz.py", "launch/test_printed_metrics.py", "install/test_lock_whole_project.py",
    "launch/test_own_project.py", "checks/test_ci_docs.py",
    # a fresh clone's command 1 and tour, each docs page's examples, real torch locked and rebuilt
    "docs/test_readme_tour.py", "docs/test_docs_examples.py", "install/test_lock.py",
    # torch.compile on the CPU: Inductor's C++ kernels built with the system compiler
    "train/test_compile_cache.py",
})

# The longest files first, in the order of their measured wall time on 2 cores (the suite's per-test
# wall times, summed per file): `-n auto --dist loadfile` hands whole files to workers in collection
# order, so a long file collected last (train/ sorts last) would run alone at the end while the other
# workers idle. Longest first is the classic makespan heuristic; the rest keep their order. One
# exception: the Slurm file goes first with the two torchrun files after it. It waited on its jobs one
# at a time (126 s of a worker, mostly idle) and the torchruns' two processes kept both cores busy
# meanwhile; its scenarios now run at once (63-66 s, tests/launch/test_slurm.py), and the first two
# minutes leave the machine 1-6% idle (benchmarks/RESULTS.md, tenth session).
LONGEST_FIRST = (
    "launch/test_slurm.py", "train/test_fsdp.py", "train/test_processes.py", "docs/test_readme_tour.py",
    "runfolder/test_reproduce.py", "bench/test_bench_tune.py", "docs/test_docs_examples.py",
    "train/test_train_run.py", "train/test_train_faults.py", "install/test_setup.py", "train/test_compile_cache.py",
    "project/test_packaging.py", "bench/test_selftest.py", "train/test_train_templates.py", "install/test_pylock_interop.py",
    "launch/test_exec.py", "runfolder/test_runfolder_attacks.py", "launch/test_printed_metrics.py",
    "bench/test_bench_parallel.py", "project/test_json_stdout.py", "bench/test_bench_failures.py",
    "install/test_lock.py", "install/test_lock_whole_project.py", "checks/test_ci_docs.py", "runfolder/test_record.py",
    "runfolder/test_runfolder_trust.py", "runfolder/test_owner_exec_sweep.py", "launch/test_own_project.py",
    "install/test_pylock_real.py", "runfolder/test_run_owner.py", "bench/test_sweep.py", "bench/test_sweep_pack.py",
    "install/test_install_failures.py", "train/test_auto_batch.py", "train/test_train_tokens.py", "train/test_train_prefetch.py",
    "runfolder/test_runfolder_fuzz.py",
)


def pytest_configure(config):
    """A file moved or renamed would silently lose its `slow` mark and its place in the order: refuse to start."""
    missing = sorted(name for name in SLOW_FILES | set(LONGEST_FIRST) if not (TESTS / name).is_file())
    if missing:
        raise pytest.UsageError(f"tests/conftest.py names test files that do not exist: {', '.join(missing)}")
    compile_envkit()


def compile_envkit() -> None:
    """envkit's bytecode, written once before the tests start their hundreds of `python -m envkit` processes.
    Where PYTHONDONTWRITEBYTECODE is set (this project's machines set it) no process writes any, and each
    one compiled envkit's modules from source again: 0.25 s of CPU an `envkit run` (parent and trainer,
    measured on the 2-core box). __pycache__ is git-ignored, and hatchling leaves it out of the sdist and
    wheel (tests/project/test_packaging.py checks). Up-to-date files are skipped, so each xdist worker
    may call it."""
    import compileall

    compileall.compile_dir(str(ROOT / "envkit"), quiet=2)


def under_tests(item) -> str:
    """The item's file as SLOW_FILES and LONGEST_FIRST name it: its path under tests/."""
    try:
        return item.path.relative_to(TESTS).as_posix()
    except ValueError:  # a file outside tests/ given on the command line
        return item.path.name


def pytest_collection_modifyitems(config, items):
    for item in items:
        if under_tests(item) in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(under_tests(item), len(rank)))  # stable: each file's tests keep their order
