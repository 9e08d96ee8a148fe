#!/bin/bash
# Data-parallel scaling as shipped, alone on a 4 x H100 host (1, 2 and 4 processes, GPT-2 small, batch 16 a GPU), then
# `envkit bench`'s ddp and fsdp rungs on 2 GPUs. Results: benchmarks/RESULTS.md.
# Run from the repository root: bash benchmarks/device/call6.sh OUTDIR
set -o pipefail
OUT=${1:-${OUT:-/tmp/out}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PY=${PY:-python3}
date -u | tee "$OUT/env.log"
timeout 260 $PY benchmarks/bench_ddp_scaling.py --nproc 1 2 4 --steps 80 2>&1 | grep -v "^ *noise" | tee "$OUT/scaling.log"
mkdir -p /tmp/g2/data/openwebtext
$PY -c "
import torch, pathlib; from envkit.train.data.tokens import write_tokens
g = torch.Generator().manual_seed(0); d = pathlib.Path('/tmp/g2/data/openwebtext')
for n in ('train.bin', 'val.bin'): write_tokens(d / n, torch.randint(50304, (1 << 24,), generator=g), 'uint16')"
sed 's/grad_accum: 16 /grad_accum: 1  /; s/batch_size: 32 /batch_size: 16 /' templates/train/gpt2_small_tokens.yaml > /tmp/g2/gpt2.yaml
CUDA_VISIBLE_DEVICES=0,1 timeout 250 $PY -m envkit bench --config /tmp/g2/gpt2.yaml --baseline device --seconds 4 --budget 4m \
  --output "$OUT/ladder.json" 2>&1 | tee "$OUT/bench.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
