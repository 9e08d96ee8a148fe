#!/bin/bash
# On 2 GPUs: the GPU test of training.ddp_reduce after_backward (CUDA graphs kept) against DDP's overlap, then the 1.5B GPT
# at batch 16 a GPU under what `auto` picks (ddp: its state fits one GPU), its MFU and peak memory.
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/ddp_reduce_after_backward_2gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
if [ ! -d .git ]; then git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "device copy"; fi
timeout 200 $PY -m pytest -q -p no:cacheprovider tests/train/test_multi_gpu.py -k after_the_backward 2>&1 | tail -n 8 | tee "$OUT/gpu_test.log"
timeout 330 $PY benchmarks/bench_ddp_scaling.py --size 1.5b --nproc 2 --batch 16 --steps 40 2>&1 | grep -v "^ *noise" \
  | tail -n 6 | tee "$OUT/big.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
