#!/bin/bash
# Every GPU test on one GPU (-m gpu: the trainer's, data on the device, the device watch, the device fault, bench's CUDA
# rungs, selftest on CUDA; call 19 ran 5 of them before its time limit), torch's bytecode written first (first_step_without_bytecode.sh says
# why). Run from the repository root: bash benchmarks/device/gpu_tests_one_gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
SITE=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
$PY -m compileall -q -j 16 "$SITE" > /dev/null 2>&1
timeout 550 $PY -m pytest -q -p no:cacheprovider -m gpu -rs --durations=15 tests/train/test_train_gpu.py tests/train/test_data_on_device.py \
  tests/train/test_device_watch.py tests/train/test_train_faults.py tests/bench/test_bench_tune.py tests/bench/test_selftest.py 2>&1 \
  | tail -n 40 | tee "$OUT/gpu_tests.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
