#!/bin/bash
# Where GPT-2 small's warm first step goes on one GPU, and what the switches tried against it do.
# Torch's bytecode written first (the image ships none and sets PYTHONDONTWRITEBYTECODE: a pip install writes
# it, so the figures a user meets are with it); then the start floors (python, import torch, CUDA's start,
# compile's imports), `bench_time_to_first_step.py` with its breakdown (cold, warm and again REPEAT times,
# the plain loop, the variants in VARIANTS, one warm start under cProfile), and torch's AOT path against the
# mega cache (bench_aot_first_step.py; AOT=0 leaves it out). Results: benchmarks/RESULTS.md, 2026-12-07.
# Run from the repository root: bash benchmarks/device/first_step_breakdown.sh OUTDIR
. benchmarks/device/common.sh "$@"
unset PYTHONDONTWRITEBYTECODE
SP=$($PY -c "import site; print(site.getsitepackages()[0])")
s=$(date +%s); $PY -m compileall -q -j 16 "$SP" > /dev/null 2>&1; echo "bytecode written in $(( $(date +%s) - s )) s"
LOGS=/tmp/ttfs_logs; rm -rf $LOGS; mkdir -p $LOGS
[ "${FLOORS:-1}" = 1 ] && { timeout 120 $PY benchmarks/bench_start_floors.py --runs 1 > "$OUT/floors.log" 2>&1; echo "floors rc=$?"; }
VARIANTS=${VARIANTS-"--variant nowarmpool:TORCH_WARM_POOL=0 --variant precompile:TORCH_CACHING_PRECOMPILE=1:cold"}
timeout ${T_TTFS:-330} $PY benchmarks/bench_time_to_first_step.py --steps ${STEPS:-12} --repeat ${REPEAT:-2} --profile-warm $VARIANTS \
  --logs $LOGS > "$OUT/ttfs.log" 2>&1; echo "ttfs rc=$?"
[ "${AOT:-1}" = 1 ] && { timeout 150 $PY benchmarks/bench_aot_first_step.py --logs $LOGS > "$OUT/aot.log" 2>&1; echo "aot rc=$?"; }
tar czf "$OUT/ttfs_logs.tgz" -C /tmp ttfs_logs
cat "$OUT/floors.log" 2>/dev/null | tail -8
grep -A30 "^cold: where" "$OUT/ttfs.log" | head -32
grep -A30 "^warm0: where" "$OUT/ttfs.log" | head -32
grep -A16 "^plain-again0: where" "$OUT/ttfs.log" | head -17
grep -A60 "losses identical" "$OUT/ttfs.log"
tail -12 "$OUT/aot.log" 2>/dev/null
echo "done $(date -u)" | tee -a "$OUT/env.log"
