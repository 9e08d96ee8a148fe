#!/bin/bash
# Ran at 9e88efe (git checkout 9e88efe to run it again). The floor under a warm first step on one GPU (bench_start_floors.py: Python, import torch, CUDA's start, compile's
# imports, and the driver started on a thread beside them), then GPT-2 small's time to the first step from the tree
# before CUDA's start moved to a thread (.gpu/before: `git archive 5ed5e06`) and from this one, in the same lease, with
# the plain loop's cold and second runs. Results: benchmarks/RESULTS.md. Run from the repository root:
# bash benchmarks/device/first_step_floor_at_9e88efe.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
nvidia-smi -q | grep -i -m2 "persistence\|product name" | tee -a "$OUT/env.log"
timeout 170 $PY benchmarks/bench_start_floors.py --runs 3 2>&1 | tee "$OUT/floors.log"
timeout 150 $PY benchmarks/bench_time_to_first_step.py --steps 30 --skip-plain --tree .gpu/before 2>&1 | tail -n 12 | tee "$OUT/first_before.log"
mkdir -p "$OUT/before" "$OUT/after"; mv /tmp/bench-ttfs-*/*.log "$OUT/before/" 2>/dev/null; rm -rf /tmp/bench-ttfs-*
timeout 230 $PY benchmarks/bench_time_to_first_step.py --steps 30 2>&1 | tail -n 14 | tee "$OUT/first_after.log"
mv /tmp/bench-ttfs-*/*.log "$OUT/after/" 2>/dev/null
echo "done $(date -u)" | tee -a "$OUT/env.log"
