#!/bin/bash
# Data-parallel scaling as shipped, alone on a 4 x H100 host (1, 2 and 4 processes, GPT-2 small, batch 16 a GPU), then
# `envkit bench`'s ddp and fsdp rungs on 2 GPUs. Results: benchmarks/RESULTS.md.
# Run from the repository root: bash benchmarks/device/ddp_scaling_as_shipped_4gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
timeout 260 $PY benchmarks/bench_ddp_scaling.py --nproc 1 2 4 --steps 80 2>&1 | grep -v "^ *noise" | tee "$OUT/scaling.log"
gpt2_bench_config 16777216
CUDA_VISIBLE_DEVICES=0,1 timeout 250 $PY -m envkit bench --config /tmp/g2/gpt2.yaml --baseline device --seconds 4 --budget 4m \
  --output "$OUT/ladder.json" 2>&1 | tee "$OUT/bench.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
