#!/bin/bash
# Determinism and DDP/FSDP figures on a 4 x H100 host, third call. Stage A: ResNet-18 CIFAR default / deterministic /
# deterministic again, alone on GPU 0. Stage B: FSDP as now shipped (GPT-2 small: the whole model one
# unit) beside DDP on GPUs 0,1; GPT-2 small default against deterministic with FlashAttention-2 for both
# (cuDNN attention is unavailable under deterministic algorithms) on GPU 2.
set -o pipefail
OUT=${1:-${OUT:-/tmp/out}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PY=${PY:-python3}
SA=${SA:-150}; SB=${SB:-185}
date -u | tee "$OUT/env.log"
if [ ! -d .git ]; then git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "device copy"; fi
CUDA_VISIBLE_DEVICES=0 timeout $SA $PY benchmarks/bench_reproduce.py --models cifar --cifar-steps 800 --repeat --reproduce none --out /tmp/det3-cifar > "$OUT/det_cifar.log" 2>&1
echo "stage A done $(date -u)" | tee -a "$OUT/env.log"
CUDA_VISIBLE_DEVICES=0,1 timeout $SB $PY benchmarks/bench_ddp_scaling.py --nproc 2 --steps 80 --try training.parallel=fsdp > "$OUT/fsdp_pair01.log" 2>&1 &
CUDA_VISIBLE_DEVICES=2 timeout $SB $PY benchmarks/bench_reproduce.py --models gpt2 --steps 60 --repeat --reproduce none --set training.sdpa_backend=flash --out /tmp/det3-gpt2 > "$OUT/det_gpt2_flash.log" 2>&1 &
wait
echo "stage B done $(date -u)" | tee -a "$OUT/env.log"
grep -v '^ \|^\[\|^\]\|^{\|^}' "$OUT"/det_*.log; grep -h "proc" "$OUT"/fsdp_pair01.log | grep -v "^\["
