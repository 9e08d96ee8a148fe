#!/bin/bash
# The ENVKIT_* variables it sets were experiment-only switches (commits 6006721 and 77ce0d7, removed in de8cd97);
# without them those runs repeat the plain configuration. Results: benchmarks/RESULTS.md (2026-11-27).
# Determinism and DDP/FSDP figures on a 4 x H100 host, second call. Stage A: ResNet-18 CIFAR default / deterministic /
# deterministic again on GPU 0 (longer, for steadier windows), GPT-2 small with Inductor's deterministic
# mode off on GPU 1 (profiled). Stage B: FSDP variants beside DDP on GPUs 0,1; DDP variants on GPUs 2,3.
set -o pipefail
OUT=${1:-${OUT:-/tmp/out}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PY=${PY:-python3}
SA=${SA:-200}; SB=${SB:-320}
date -u | tee "$OUT/env.log"
if [ ! -d .git ]; then git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "device copy"; fi
VENV=$($PY -c "import sys; print(sys.prefix)")
CUDA_VISIBLE_DEVICES=0 timeout $SA $PY benchmarks/bench_reproduce.py --models cifar --cifar-steps 800 --repeat --reproduce none --out /tmp/det2-cifar > "$OUT/det_cifar.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 ENVKIT_INDUCTOR_DETERMINISTIC=0 timeout $SA $PY benchmarks/bench_reproduce.py --models gpt2 --steps 60 --repeat --reproduce det --venv "$VENV" --profile-steps 41:43 --out /tmp/det2-gpt2 > "$OUT/det_gpt2_noinductordet.log" 2>&1 &
wait
mkdir -p "$OUT/profiles" && for f in /tmp/det2-gpt2/runs/*/*/profile_steps_41-43*.txt; do [ -f "$f" ] && cp "$f" "$OUT/profiles/$(basename $(dirname $f))-$(basename $f)"; done
echo "stage A done $(date -u)" | tee -a "$OUT/env.log"
CUDA_VISIBLE_DEVICES=0,1 timeout $SB $PY benchmarks/bench_ddp_scaling.py --nproc 2 --steps 80 --try training.parallel=fsdp \
  --try training.parallel=fsdp,env:ENVKIT_FSDP_MIN_UNIT=1000000000 --try training.parallel=fsdp,env:ENVKIT_FSDP_MIN_UNIT=-1 --try training.parallel=fsdp,env:ENVKIT_FSDP_RESHARD=1 > "$OUT/fsdp_pair01.log" 2>&1 &
CUDA_VISIBLE_DEVICES=2,3 timeout $SB $PY benchmarks/bench_ddp_scaling.py --nproc 2 --steps 80 --try env:NCCL_MAX_CTAS=8 --try env:NCCL_MAX_CTAS=16 \
  --try env:ENVKIT_DDP_CUDAGRAPHS=1,env:ENVKIT_STOP_EVERY=1000000 > "$OUT/ddp_pair23.log" 2>&1 &
wait
echo "stage B done $(date -u)" | tee -a "$OUT/env.log"
grep -v '^ \|^\[\|^\]\|^{\|^}' "$OUT"/det_*.log; grep -h "proc" "$OUT"/fsdp_pair01.log "$OUT"/ddp_pair23.log | grep -v "^\["
