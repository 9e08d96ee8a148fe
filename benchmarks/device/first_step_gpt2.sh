#!/bin/bash
# GPT-2 small's time to the first step on one GPU (cold / warm / again / plain loop, torch's compile phase timers and each
# line's time in the logs), then `envkit bench`'s ladder with its ddp and fsdp rungs on both GPUs, alone on the host.
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/first_step_gpt2.sh OUTDIR
. benchmarks/device/common.sh "$@"
CUDA_VISIBLE_DEVICES=0 timeout 240 $PY benchmarks/bench_time_to_first_step.py --steps 40 2>&1 | tail -n 14 | tee "$OUT/first_gpt.log"
cp /tmp/bench-ttfs-*/*.log "$OUT/" 2>/dev/null
gpt2_bench_config 16777216
CUDA_VISIBLE_DEVICES=0,1 timeout 300 $PY -m envkit bench --config /tmp/g2/gpt2.yaml --baseline device --seconds 3 \
  --budget 280s --output "$OUT/ladder.json" > "$OUT/bench.log" 2>&1
echo "done $(date -u)" | tee -a "$OUT/env.log"
tail -n 32 "$OUT/bench.log"
