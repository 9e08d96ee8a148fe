"""A fuzzer that keeps a received run folder safe: hostile folders generated from a genuine one
(tests/hostile_folders.py: files replaced by FIFOs, links, devices, sparse giants; wrong types and
deep nesting; control characters in every string; patches and archives that say more than the
record; paths inside and outside the folder; commands, interpreters, imports and indexes that would
create a marker) and envkit's commands run on each: no marker, no hang, no traceback, exit 2 from
`reproduce` without consent, nothing written outside the folder, no temporary folder left.

The folders come from a machine whose key is not this one's (a fresh ENVKIT_CACHE_DIR): every one
is someone else's data, as a received folder is. CASES here (60, seeded: about 8 s on the 2-core CI box); `benchmarks/fuzz_run_folders.py`
runs many more and prints what it found."""

from __future__ import annotations

import os
import random
import shutil
import time

import pytest
from hostile_folders import COMMANDS, check, genuine_run, mutate

CASES = int(os.environ.get("ENVKIT_FUZZ_CASES", "60"))
SEED = int(os.environ.get("ENVKIT_FUZZ_SEED", "20261207"))


@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    return genuine_run(root, {"ENVKIT_CACHE_DIR": str(root / "cache"), "ENVKIT_HOME": str(root / "no-managed-env")})


def test_hostile_run_folders_break_no_invariant(genuine, tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "another-machines-cache"))
    monkeypatch.setenv("ENVKIT_HOME", str(tmp_path / "no-managed-env"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    rng = random.Random(SEED)
    findings, t0 = [], time.monotonic()
    for i in range(CASES):
        case = tmp_path / f"case{i}"
        run = case / "runs" / "proj" / genuine.name
        shutil.copytree(genuine, run, symlinks=True)
        marker = case / "PWNED"
        done = mutate(run, rng, marker)
        commands = None if i % 4 == 0 else [c for c in COMMANDS if c[0] == "reproduce"]
        found = check(run, marker, **({} if commands is None else {"commands": commands}))
        findings += [f"case {i} ({', '.join(done)}): {f}" for f in found]
        shutil.rmtree(case, ignore_errors=True)
    print(f"{CASES} hostile folders in {time.monotonic() - t0:.1f} s, {len(findings)} findings")
    assert findings == []
