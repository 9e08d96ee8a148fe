#!/bin/bash
# The same host as call13.sh: 2 processes as shipped against DDP's overlap, then the plain hand-written DDP loop with
# 1, 2 and 4 processes (the reference). Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/call14.sh OUTDIR
. benchmarks/device/common.sh "$@"
timeout 250 $PY benchmarks/bench_ddp_scaling.py --nproc 2 --steps 80 --try training.ddp_reduce=overlap 2>&1 \
  | grep -v "^ *noise" | tee "$OUT/scaling2.log"
timeout 300 $PY benchmarks/bench_plain_ddp.py --nproc 1 2 4 --bucket-mb 100 2>&1 | tail -n 14 | tee "$OUT/plain.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
