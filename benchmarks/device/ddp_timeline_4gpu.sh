#!/bin/bash
# GPT-2 small on 4 GPUs as shipped (DDP's overlap), with rank 0's device timeline of steps 41-43: how much of the
# all-reduce no computation hides at 4 processes. Results: benchmarks/RESULTS.md.
# Run from the repository root: bash benchmarks/device/ddp_timeline_4gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
timeout 230 $PY benchmarks/bench_ddp_scaling.py --nproc 4 --steps 50 --profile 2>&1 | grep -v "^ *noise" | tee "$OUT/timeline4.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
