#!/bin/bash
# Determinism within 5% on GPT-2 small. `envkit run` of GPT-2 small: the default run, the deterministic
# run as shipped (SDPA: FlashAttention-2 where cuDNN is refused) and with FlexAttention (ENVKIT_DETERMINISTIC_ATTENTION=flex), each deterministic
# one twice and compared at every logged step (bench_determinism_gpt2.py); then the attention kernels a deterministic
# step can use, one layer timed and checked bit for bit (bench_det_attention.py; MICRO=0 leaves it out).
# Results: benchmarks/RESULTS.md, 2026-12-07. Run from the repository root: bash benchmarks/device/deterministic_attention.sh OUTDIR
. benchmarks/device/common.sh "$@"
unset PYTHONDONTWRITEBYTECODE
timeout ${T_DET:-300} $PY benchmarks/bench_determinism_gpt2.py --steps ${STEPS:-120} --logs /tmp/det_logs $RUNS > "$OUT/determinism.log" 2>&1
echo "determinism rc=$?"; tail -14 "$OUT/determinism.log"
tar czf "$OUT/det_logs.tgz" -C /tmp det_logs 2>/dev/null
[ "${MICRO:-1}" = 1 ] && { timeout ${T_MICRO:-150} $PY benchmarks/bench_det_attention.py > "$OUT/attention.log" 2>&1; echo "attention rc=$?"; tail -12 "$OUT/attention.log"; }
echo "done $(date -u)" | tee -a "$OUT/env.log"
