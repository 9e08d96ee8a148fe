#!/bin/bash
# The same host as ddp_scaling_4gpu.sh: GPT-2 small with 2 processes as shipped against DDP's overlap; ResNet-18 on CIFAR-10
# (batch 128 a GPU, launch-bound: where CUDA graphs matter most) with 1, 2 and 4 processes, and at 4 DDP's overlap;
# then the plain hand-written DDP loop with 1, 2 and 4 processes (the reference).
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/ddp_overlap_and_cifar_4gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
timeout 150 $PY benchmarks/bench_ddp_scaling.py --nproc 2 --steps 80 --try training.ddp_reduce=overlap 2>&1 \
  | grep -v "^ *noise" | tail -n 4 | tee "$OUT/scaling2.log"
timeout 220 $PY benchmarks/bench_ddp_scaling.py --size cifar --nproc 1 2 4 --steps 600 --set training.epochs=null \
  --set logging.every_steps=50 --try training.ddp_reduce=overlap 2>&1 \
  | grep -v "^ *noise" | tail -n 10 | tee "$OUT/cifar.log"
timeout 180 $PY benchmarks/bench_plain_ddp.py --nproc 1 2 4 --bucket-mb 100 2>&1 | tail -n 14 | tee "$OUT/plain.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
