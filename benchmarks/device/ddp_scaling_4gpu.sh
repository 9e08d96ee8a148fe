#!/bin/bash
# Data-parallel scaling on a 4-GPU host (GPT-2 small, batch 16 a GPU), envkit run with 1, 2 and 4 processes as shipped
# (training.ddp_reduce auto: after_backward under the cuda-hopper profile's CUDA graphs), then at 4 processes DDP's
# overlapped all-reduce (training.ddp_reduce=overlap, the earlier default) and after_backward with a bf16 all-reduce.
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/ddp_scaling_4gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
timeout 560 $PY benchmarks/bench_ddp_scaling.py --nproc 1 2 4 --steps 80 --try training.ddp_reduce=overlap \
  --try training.ddp_comm_dtype=bf16 2>&1 | grep -v "^ *noise" | tee "$OUT/scaling.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
