"""Regenerate envkit's build table (envkit/data/torch_variants.toml) from PyTorch's index.

Reads each build's project page (BASE/<build>/torch/, BASE/nightly/<build>/torch/ for the
nightlies; BASE = --base, ENVKIT_PYTORCH_INDEX, else https://download.pytorch.org/whl) and prints
which release lines each CUDA build holds Linux x86_64 wheels for, as [[release]] rows in the
table's own format. The arch set of a build (which GPUs it holds kernels for) cannot be read off
the index: a row reuses the arch set the table gives that build in its nearest release and says so;
a build the table has never seen is printed as "UNKNOWN" (read torch.cuda.get_arch_list() of one of
its wheels, then name or add an [arch_sets] entry).

    python benchmarks/regen_build_table.py            # the rows, as TOML
    python benchmarks/regen_build_table.py --check    # differences from the shipped table; exit 1 if any

Needs the network (or a mirror laid out like download.pytorch.org/whl); envkit itself plans from
the shipped table when offline or replaying.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packaging.version import Version  # noqa: E402

from envkit.checks import builds  # noqa: E402
from envkit.errors import EnvkitError  # noqa: E402
from envkit.install.index import pages  # noqa: E402

# Builds worth asking about: every CUDA index PyTorch has published from 11.8 on, and the next two.
CANDIDATES = ["cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130", "cu132", "cu134", "cu136"]


def linux_lines(cands: list[pages.Candidate]) -> set[str]:
    """Release lines ("2.13") with a Linux x86_64 wheel among these candidates (final releases only)."""
    out = set()
    for c in cands:
        if c.version.is_prerelease or not any("x86_64" in str(t) and "linux" in str(t) for t in c.tags):
            continue
        out.add(f"{c.version.major}.{c.version.minor}")
    return out


def nightly_builds(base: str) -> list[str]:
    found = []
    for b in CANDIDATES:
        try:
            cands = pages.fetch(f"{base}/nightly/{b}", "torch")
        except EnvkitError:
            continue
        newest = max((c.version for c in cands if c.version.is_devrelease), default=None)
        if newest is not None:
            found.append((b, newest))
    if not found:
        return []
    # a build whose newest nightly is months behind the others was dropped from the matrix
    latest = max(v for _, v in found)
    return [b for b, v in found if v.release[:2] == latest.release[:2]]


def read_index(base: str) -> dict[str, list[str]]:
    """{"2.13": ["cu126", "cu130", "cu132"], ...} from the index pages."""
    lines: dict[str, list[str]] = {}
    for b in CANDIDATES:
        try:
            cands = pages.fetch(f"{base}/{b}", "torch")
        except EnvkitError as exc:
            print(f"# {b}: {exc.message}", file=sys.stderr)
            continue
        for line in linux_lines(cands):
            lines.setdefault(line, []).append(b)
    return dict(sorted(lines.items(), key=lambda kv: Version(kv[0])))


def arch_set_for(backend: str, line: str) -> str:
    """The arch set the shipped table gives this build in the nearest release that has it."""
    rows = [r for r in builds.releases() if backend in r.get("cuda", {})]
    if not rows:
        return "UNKNOWN"
    v = Version(line)
    nearest = min(rows, key=lambda r: abs(Version(r["torch"]).minor - v.minor) + 100 * abs(Version(r["torch"]).major - v.major))
    return nearest["cuda"][backend]


def toml_rows(found: dict[str, list[str]], nightly: list[str]) -> str:
    out = []
    for line, backends in found.items():
        cuda = ", ".join(f'{b} = "{arch_set_for(b, line)}"' for b in backends)
        out.append(f'[[release]]\ntorch = "{line}"\ncuda = {{ {cuda} }}\n')
    if nightly:
        cuda = ", ".join(f'{b} = "{arch_set_for(b, "99.0")}"' for b in nightly)
        out.append(f"[nightly]\ncuda = {{ {cuda} }}\n")
    return "\n".join(out)


def differences(found: dict[str, list[str]], nightly: list[str]) -> list[str]:
    diffs = []
    shipped = {r["torch"]: sorted(r.get("cuda", {})) for r in builds.releases()}
    for line, backends in found.items():
        if line not in shipped:
            diffs.append(f"torch {line}: on the index ({', '.join(backends)}), not in the table")
        elif sorted(backends) != shipped[line]:
            diffs.append(f"torch {line}: index has {', '.join(sorted(backends))}; table has {', '.join(shipped[line])}")
    if nightly and sorted(nightly) != sorted(builds.nightly_row().get("cuda", {})):
        diffs.append(f"nightly: index has {', '.join(sorted(nightly))}; table has {', '.join(sorted(builds.nightly_row()['cuda']))}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=os.environ.get("ENVKIT_PYTORCH_INDEX") or builds.table()["index"]["base"])
    ap.add_argument("--check", action="store_true", help="print the differences from the shipped table; exit 1 if any")
    ap.add_argument("--no-nightly", action="store_true")
    args = ap.parse_args(argv)
    base = args.base.rstrip("/")
    found = read_index(base)
    if not found:
        print(f"no torch wheels read from {base} (offline?): the shipped table (checked {builds.table()['checked']}) stands",
              file=sys.stderr)
        return 2
    nightly = [] if args.no_nightly else nightly_builds(base)
    if args.check:
        diffs = differences(found, nightly)
        for d in diffs:
            print(d)
        print(f"{len(diffs)} difference(s) from the table checked {builds.table()['checked']}")
        return 1 if diffs else 0
    print(f"# read from {base}; paste into envkit/data/torch_variants.toml, set `checked`, keep `python` and `pypi_cuda`")
    print(toml_rows(found, nightly))
    return 0


if __name__ == "__main__":
    sys.exit(main())
