#!/bin/bash
# ResNet-18 on CIFAR-10's time to the first step (cold / warm / again, the plain loop cold and again), then `envkit
# bench`'s ladder on GPT-2 small at batch 16 (its peak-memory column now counted from each rung's start).
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/call21.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
timeout 300 $PY benchmarks/bench_time_to_first_step.py --cifar --steps 60 2>&1 | tail -n 14 | tee "$OUT/first_cifar.log"
mkdir -p "$OUT/cifar"; mv /tmp/bench-ttfs-*/*.log "$OUT/cifar/" 2>/dev/null
gpt2_bench_config
timeout 240 $PY -m envkit bench --config /tmp/g2/gpt2.yaml --baseline device --seconds 3 --budget 200s \
  --output "$OUT/ladder.json" > "$OUT/bench.log" 2>&1
tail -n 25 "$OUT/bench.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
