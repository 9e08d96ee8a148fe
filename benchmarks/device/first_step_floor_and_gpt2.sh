#!/bin/bash
# On one host: the floor under a warm first step (bench_start_floors.py), then GPT-2 small's time to the first step
# (cold / warm / again, the plain loop cold and again). Results: benchmarks/RESULTS.md.
# Run from the repository root: bash benchmarks/device/first_step_floor_and_gpt2.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
timeout 150 $PY benchmarks/bench_start_floors.py --runs 2 2>&1 | tee "$OUT/floors.log"
timeout 330 $PY benchmarks/bench_time_to_first_step.py --steps 30 2>&1 | tail -n 14 | tee "$OUT/first_gpt.log"
mkdir -p "$OUT/gpt"; mv /tmp/bench-ttfs-*/*.log "$OUT/gpt/" 2>/dev/null
echo "done $(date -u)" | tee -a "$OUT/env.log"
