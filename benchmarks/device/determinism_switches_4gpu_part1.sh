#!/bin/bash
# The ENVKIT_* variables it sets were experiment-only switches (commits 6006721 and 77ce0d7, removed in de8cd97);
# without them those runs repeat the plain configuration. Results: benchmarks/RESULTS.md (2026-11-27).
# Determinism and DDP/FSDP figures on a 4 x H100 host, one call: determinism figures on GPU 0 (GPT-2 small) and GPU 1
# (ResNet-18 CIFAR) while GPUs 2,3 try DDP hypotheses; then 1, 2 and 4 processes alone.
# Run from the repository root: bash benchmarks/device/determinism_switches_4gpu_part1.sh OUTDIR
set -o pipefail
OUT=${1:-${OUT:-/tmp/out}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PY=${PY:-python3}
S1=${S1:-300}; S2=${S2:-200}
{ date -u; nvidia-smi -L; $PY -c "import torch, sys; print(torch.__version__, sys.prefix, torch.cuda.device_count())"; env | grep -E '^NCCL|^TORCH' ; } 2>&1 | tee "$OUT/env.log"
# envkit reproduce restores the code from git: make this copy a repository of its own
if [ ! -d .git ]; then git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "device copy"; fi
VENV=$($PY -c "import sys; print(sys.prefix)")
DDP="--nproc 2 --steps 80 ${DDPSET:-}"
# stage 1: three jobs side by side, each on its own GPUs
CUDA_VISIBLE_DEVICES=0 timeout $S1 $PY benchmarks/bench_reproduce.py --models gpt2 --steps 60 --repeat --reproduce det --venv "$VENV" --out /tmp/det-gpt2 ${DETSET:-} > "$OUT/det_gpt2.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $S1 $PY benchmarks/bench_reproduce.py --models cifar --cifar-steps 400 --repeat --reproduce det --venv "$VENV" --out /tmp/det-cifar ${DETSET:-} > "$OUT/det_cifar.log" 2>&1 &
CUDA_VISIBLE_DEVICES=2,3 timeout $S1 $PY benchmarks/bench_ddp_scaling.py $DDP --try env:ENVKIT_DDP_CUDAGRAPHS=1 --try env:ENVKIT_STOP_EVERY=1000000 \
  --try env:TORCH_NCCL_HIGH_PRIORITY=1 2>&1 | tee "$OUT/ddp_pair23.log"
wait
echo "stage 1 done $(date -u)" | tee -a "$OUT/env.log"
# stage 2: alone on the host, the scaling figures
timeout $S2 $PY benchmarks/bench_ddp_scaling.py --nproc 1 2 4 --steps 80 ${SCALESET:-} 2>&1 | tee "$OUT/scaling.log"
echo "stage 2 done $(date -u)" | tee -a "$OUT/env.log"
tail -n 30 "$OUT"/det_*.log
