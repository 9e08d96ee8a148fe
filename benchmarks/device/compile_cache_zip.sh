#!/bin/bash
# The compile cache's new file (torch's blob and the CPU's C++ kernels in one signed zip) on one H100: the GPU test that a
# second run compiles nothing new, then GPT-2 small's time to the first step cold / warm / again with the cache.
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/compile_cache_zip.sh OUTDIR
. benchmarks/device/common.sh "$@"
$PY -m compileall -q -j 0 "$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')" > /dev/null 2>&1
timeout 200 $PY -m pytest -q -p no:cacheprovider tests/train/test_train_gpu.py -k second_run 2>&1 | tail -8 | tee "$OUT/gpu_test.log"
timeout 300 $PY benchmarks/bench_time_to_first_step.py --steps 60 2>&1 | tail -25 | tee "$OUT/first_gpt.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
