"""The first record of a run in an environment: the pylock.toml envkit writes into the run folder
(envkit/record/envlock.py) looks up each installed wheel's sha256 on the indexes pip is configured
with. A run pays it once per environment (the result is cached), and every run with a fresh
ENVKIT_CACHE_DIR pays it again (the tests do, and CI's fresh machine).

    python benchmarks/bench_run_record.py              # this interpreter's environment, 5 alternating pairs
    python benchmarks/bench_run_record.py --repeats 9

Two ways, alternated in one process, each building the whole lock (the lock's text is checked equal):
- as shipped: each lookup thread keeps one requests.Session (one TLS handshake per index host), and a
  project page's files of other versions are skipped by the version field of their names;
- before: a new Session for each package's page (a TLS handshake and the CA bundle loaded each time),
  and every file of the page parsed (tags, URL) before the version was compared.
Prints the median wall and CPU seconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envkit.install.index import pages  # noqa: E402 - after the path: the checkout's envkit
from envkit.record import envlock  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def build_once(before: bool) -> tuple[float, float, str]:
    shipped = pages.fetch

    def as_before(index_url, name, *, session=None, version=None):
        return [c for c in shipped(index_url, name) if version is None or c.version == version]

    if before:
        pages.fetch = as_before
    try:
        w0, c0 = time.perf_counter(), _cpu()
        lock = envlock.build(sys.executable, "bench", device="cpu")
        return time.perf_counter() - w0, _cpu() - c0, lock.text
    finally:
        pages.fetch = shipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {"shipped": [], "before": []}
    texts = set()
    for _ in range(args.repeats):
        for name in ("before", "shipped"):
            wall, cpu, text = build_once(name == "before")
            rows[name].append((wall, cpu))
            texts.add(text)
    packages = envlock.build(sys.executable, "bench", device="cpu").packages
    print(f"{packages} packages, {len(texts)} distinct lock text(s) (1: both ways wrote the same lock)")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()}
    for name in ("before", "shipped"):
        print(f"{name:8s} wall {med[name][0]:5.2f} s  cpu {med[name][1]:5.2f} s  (median of {args.repeats})")
    print(f"ratio    wall {med['before'][0] / med['shipped'][0]:.2f}x  cpu {med['before'][1] / med['shipped'][1]:.2f}x")


if __name__ == "__main__":
    main()
