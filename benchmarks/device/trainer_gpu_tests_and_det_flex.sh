#!/bin/bash
# A short lease: the trainer's one-GPU tests (the trainer, data on the device, FlexAttention's same numbers
# twice), then GPT-2 small deterministic as shipped (FlexAttention) twice beside the default run.
# Results: benchmarks/RESULTS.md, 2026-12-07. Run from the repository root: bash benchmarks/device/trainer_gpu_tests_and_det_flex.sh OUTDIR
. benchmarks/device/common.sh "$@"
unset PYTHONDONTWRITEBYTECODE
SITE=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
$PY -m compileall -q -j 16 "$SITE" > /dev/null 2>&1
timeout ${T_TESTS:-150} $PY -m pytest -q -p no:cacheprovider -m gpu tests/train/test_train_gpu.py tests/train/test_first_step_timing.py \
  tests/train/test_data_on_device.py > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -5 "$OUT/gpu_tests.log"
timeout ${T_DET:-120} $PY benchmarks/bench_determinism_gpt2.py --steps 60 --run default= --run det=training.deterministic=true \
  > "$OUT/determinism.log" 2>&1; echo "determinism rc=$?"; tail -8 "$OUT/determinism.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
