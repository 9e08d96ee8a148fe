#!/bin/bash
# After the run folder became one object and FlexAttention became a deterministic gpt's attention on CUDA:
# every one-GPU test (first_step_closing_check.sh PART=tests, with doctor), then GPT-2 small's determinism as
# shipped (bench_determinism_gpt2.py: default, det-sdpa and det, each deterministic one twice).
# Results: benchmarks/RESULTS.md, 2026-12-07. Run from the repository root: bash benchmarks/device/gpu_tests_and_flex_default.sh OUTDIR
. benchmarks/device/common.sh "$@"
PART=tests bash benchmarks/device/first_step_closing_check.sh "$@"
unset PYTHONDONTWRITEBYTECODE
timeout ${T_DET:-240} $PY benchmarks/bench_determinism_gpt2.py --steps 60 --logs /tmp/det_logs > "$OUT/determinism.log" 2>&1
echo "determinism rc=$?"; tail -12 "$OUT/determinism.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
