#!/bin/bash
# Where compile's imports spend 14 s on an H100 host (profile_compile_imports.py; 4.7 s on the 2-core CPU box), then
# ResNet-18 on CIFAR-10's time to the first step (cold / warm / again, the plain loop cold and again), then `envkit
# bench`'s ladder on GPT-2 small at batch 16 (its peak-memory column now counted from each rung's start).
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/compile_import_time.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
python3 -c "import sys, os; print(sys.version, os.environ.get('PYTHONDONTWRITEBYTECODE'))" | tee -a "$OUT/env.log"
ls "$($PY -c 'import torch, os; print(os.path.dirname(torch.__file__))')/__pycache__" | head -3 | tee -a "$OUT/env.log"
timeout 90 $PY benchmarks/profile_compile_imports.py --top 30 > "$OUT/imports.log" 2>&1
timeout 300 $PY benchmarks/bench_time_to_first_step.py --cifar --steps 60 2>&1 | tail -n 14 | tee "$OUT/first_cifar.log"
mkdir -p "$OUT/cifar"; mv /tmp/bench-ttfs-*/*.log "$OUT/cifar/" 2>/dev/null
gpt2_bench_config
timeout 190 $PY -m envkit bench --config /tmp/g2/gpt2.yaml --baseline device --seconds 3 --budget 150s \
  --output "$OUT/ladder.json" > "$OUT/bench.log" 2>&1
tail -n 25 "$OUT/bench.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
