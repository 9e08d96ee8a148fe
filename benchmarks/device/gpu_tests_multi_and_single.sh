#!/bin/bash
# The GPU tests: the multi-GPU ones on GPUs 0,1 beside the one-GPU ones on GPU 2 (their first real-CUDA run of the
# model initialised on the GPU and of training.ddp_reduce after_backward). Run from the repository root.
. benchmarks/device/common.sh "$@"
if [ ! -d .git ]; then git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "device copy"; fi
(CUDA_VISIBLE_DEVICES=0,1 timeout 420 $PY -m pytest -q -p no:cacheprovider tests/train/test_multi_gpu.py 2>&1 | tail -n 15 > "$OUT/multi_gpu_tests.log") &
CUDA_VISIBLE_DEVICES=2 timeout 420 $PY -m pytest -q -p no:cacheprovider tests/train/test_train_gpu.py 2>&1 | tail -n 15 > "$OUT/gpu_tests.log"
wait
cat "$OUT/multi_gpu_tests.log" "$OUT/gpu_tests.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
