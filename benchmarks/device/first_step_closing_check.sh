#!/bin/bash
# The closing check of the first-minute work at one commit, on one GPU: doctor, the GPU tests (every
# file's `-m gpu` tests; the two-GPU ones skip on one), then time to the first step, cold and warm,
# against the plain compiled loop, GPT-2 small (batch 16) and ResNet-18 on CIFAR-10 (batch 128).
# PART=tests or PART=first-step runs one half; PART=multi, on a host of two or more GPUs, the two-GPU tests alone. Results: benchmarks/RESULTS.md.
# Run from the repository root: bash benchmarks/device/first_step_closing_check.sh OUTDIR
. benchmarks/device/common.sh "$@"
[ "${PART:-tests}" = tests ] && {
  $PY -m envkit doctor > "$OUT/doctor.txt" 2>&1; echo "doctor rc=$?"; tail -4 "$OUT/doctor.txt"
  s=$(date +%s)
  timeout 480 $PY -m pytest -q -p no:cacheprovider -m gpu tests/train/test_train_gpu.py tests/train/test_data_on_device.py tests/train/test_device_watch.py tests/train/test_multi_gpu.py tests/train/test_train_faults.py tests/bench/test_bench_tune.py tests/bench/test_selftest.py > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? in $(( $(date +%s) - s )) s"; tail -8 "$OUT/gpu_tests.log"
}
[ "${PART:-first-step}" = first-step ] && {
  timeout 280 $PY benchmarks/bench_time_to_first_step.py --steps 60 > "$OUT/first_gpt.log" 2>&1; echo "gpt rc=$?"
  timeout 280 $PY benchmarks/bench_time_to_first_step.py --steps 60 --cifar > "$OUT/first_cifar.log" 2>&1; echo "cifar rc=$?"
  cat "$OUT/first_gpt.log" "$OUT/first_cifar.log" | grep -v "^\s*$" | tail -40
}
[ "${PART:-}" = multi ] && {
  timeout 480 $PY -m pytest -q -p no:cacheprovider -m gpu tests/train/test_multi_gpu.py > "$OUT/multi_gpu_tests.log" 2>&1
  echo "two-GPU tests rc=$?"; tail -6 "$OUT/multi_gpu_tests.log"
}
echo "done $(date -u)" | tee -a "$OUT/env.log"
