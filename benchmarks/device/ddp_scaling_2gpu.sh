#!/bin/bash
# Data-parallel scaling on a 2-GPU host (GPT-2 small, batch 16 a GPU): as shipped, with rank 0's device sampler off
# (is rank 0 the straggler?), and with each block compiled on its own under DDP (the all-reduce hooks then fire block by
# block inside an eager backward, no DDPOptimizer split graphs); the plain DDP loop in the same lease; then the 6.7B GPT
# under ddp without compile, to its out-of-memory line and peak. Results: benchmarks/RESULTS.md.
# Run from the repository root: bash benchmarks/device/ddp_scaling_2gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
timeout 330 $PY benchmarks/bench_ddp_scaling.py --nproc 1 2 --steps 80 --try logging.device_seconds=0 \
  --try training.compile_scope=blocks 2>&1 | grep -v "^ *noise" | tee "$OUT/scaling.log"
timeout 130 $PY benchmarks/bench_plain_ddp.py --nproc 1 2 --bucket-mb 100 2>&1 | tail -n 12 | tee "$OUT/plain.log"
timeout 110 $PY benchmarks/bench_ddp_scaling.py --size 6.7b --nproc 2 --steps 5 --set training.parallel=ddp \
  --set training.compile=false 2>&1 | grep -v "^ *noise" | tail -n 20 | tee "$OUT/big_ddp.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
