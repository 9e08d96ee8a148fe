#!/bin/bash
# The full self-test on one H100, one shared worker (the default now: a probe that fails after others
# runs again alone) against a fresh interpreter for every probe (--isolate, the full run's default
# before), alternated twice, with the GPU tests of tests/bench/test_selftest.py.
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/selftest_full.sh OUTDIR
. benchmarks/device/common.sh "$@"
$PY -m compileall -q -j 0 "$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')" > /dev/null 2>&1
$PY -m envkit selftest --device cuda > "$OUT/selftest_warmup.log" 2>&1  # Inductor's and Triton's caches filled once, for both ways
for i in 1 2; do
  for how in shared isolate; do
    s=$(date +%s%N)
    $PY -m envkit selftest --device cuda --$how --json > "/tmp/selftest_$how.json" 2> /dev/null
    rc=$?
    $PY -c "import json, sys; d = json.load(open('/tmp/selftest_$how.json')); print('$how run $i: rc=$rc', round(($(date +%s%N) - $s) / 1e9, 1), 's wall,', d['seconds'], 's by its report,', d['summary'])" | tee -a "$OUT/times.log"
  done
done
$PY -m envkit selftest --device cuda 2>&1 | tee "$OUT/selftest_shared.txt" | tail -16
timeout 240 $PY -m pytest -q -p no:cacheprovider tests/bench/test_selftest.py -m gpu 2>&1 | tail -6 | tee "$OUT/gpu_test.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
