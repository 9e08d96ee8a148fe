#!/bin/bash
# `envkit bench`'s ladder with its ddp and fsdp rungs on a 2-GPU host (GPU 0 for the single-GPU rungs, both for the
# data-parallel ones, which come last); meanwhile on GPU 1, GPT-2 small's time to the first step (cold / warm / again /
# plain loop) with torch's compile phase timers, done before the ladder reaches its 2-GPU rungs.
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/bench_ladder_ddp_fsdp_2gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
gpt2_bench_config 16777216
CUDA_VISIBLE_DEVICES=1 timeout 300 $PY benchmarks/bench_time_to_first_step.py --steps 40 > "$OUT/first_gpt.log" 2>&1 &
A=$!
CUDA_VISIBLE_DEVICES=0,1 timeout 500 $PY -m envkit bench --config /tmp/g2/gpt2.yaml --baseline device --seconds 3 \
  --budget 7m --output "$OUT/ladder.json" > "$OUT/bench.log" 2>&1
wait $A
cp /tmp/bench-ttfs-*/*.log "$OUT/" 2>/dev/null
echo "done $(date -u)" | tee -a "$OUT/env.log"
tail -n 30 "$OUT/first_gpt.log"; tail -n 40 "$OUT/bench.log"
