#!/bin/bash
# Ran at 706294c (git checkout 706294c to run it again). The floor under a warm first step (bench_start_floors.py; call 18's run of it was cut by its time limit before it
# printed), then every GPU test on one GPU (-m gpu: the trainer's, CUDA's start on a thread, data on the device, the device watch, the
# device fault, bench's CUDA rungs, selftest on CUDA). Run from the repository root: bash benchmarks/device/first_step_floor_at_706294c.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
timeout 170 $PY benchmarks/bench_start_floors.py --runs 2 2>&1 | tee "$OUT/floors.log"
timeout 400 $PY -m pytest -q -p no:cacheprovider -m gpu -rs --durations=12 tests/train/test_train_gpu.py tests/train/test_data_on_device.py \
  tests/train/test_device_watch.py tests/train/test_train_faults.py tests/bench/test_bench_tune.py tests/bench/test_selftest.py 2>&1 \
  | tail -n 40 | tee "$OUT/gpu_tests.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
