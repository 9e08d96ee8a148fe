#!/bin/bash
# The first step as a user's machine has it: the lent image's torch has no bytecode (no __pycache__, and
# PYTHONDONTWRITEBYTECODE=1), so every process compiled torch's sources again (call 21: 8.5 s of `compile` in 15.3 s of
# compile's imports). pip writes the bytecode when it installs (uv with --compile-bytecode, or on the first import): here
# compileall writes it once, then on one host the floors, GPT-2 small's and ResNet-18 CIFAR's time to the first step.
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/first_step_without_bytecode.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
SITE=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
/usr/bin/time -f "compileall of $SITE: %e s wall" $PY -m compileall -q -j 16 "$SITE" > /dev/null 2> "$OUT/compileall.log"; tail -1 "$OUT/compileall.log"
ls "$SITE/torch/__pycache__" | head -2 | tee -a "$OUT/env.log"
timeout 100 $PY benchmarks/bench_start_floors.py --runs 2 2>&1 | tail -n 6 | tee "$OUT/floors.log"
timeout 60 $PY benchmarks/profile_compile_imports.py --top 12 > "$OUT/imports.log" 2>&1
timeout 200 $PY benchmarks/bench_time_to_first_step.py --steps 30 2>&1 | tail -n 14 | tee "$OUT/first_gpt.log"
mkdir -p "$OUT/gpt"; mv /tmp/bench-ttfs-*/*.log "$OUT/gpt/" 2>/dev/null; rm -rf /tmp/bench-ttfs-*
timeout 190 $PY benchmarks/bench_time_to_first_step.py --cifar --steps 60 2>&1 | tail -n 14 | tee "$OUT/first_cifar.log"
mkdir -p "$OUT/cifar"; mv /tmp/bench-ttfs-*/*.log "$OUT/cifar/" 2>/dev/null
echo "done $(date -u)" | tee -a "$OUT/env.log"
