#!/bin/bash
# GPT-2 small's time to the first step after the model is initialised on the GPU (cold / warm / again / plain loop), then
# the GPU tests of the trainer (tests/train/test_train_gpu.py: bf16 + compile, the compile cache's second run, the GPU init).
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/first_step_after_init_on_gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
timeout 200 $PY benchmarks/bench_time_to_first_step.py --steps 40 2>&1 | tail -n 14 | tee "$OUT/first_gpt.log"
cp /tmp/bench-ttfs-*/*.log "$OUT/" 2>/dev/null
timeout 330 $PY -m pytest -q -p no:cacheprovider tests/train/test_train_gpu.py 2>&1 | tail -n 15 | tee "$OUT/gpu_tests.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
