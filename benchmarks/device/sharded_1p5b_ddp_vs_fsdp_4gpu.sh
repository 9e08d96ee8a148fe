#!/bin/bash
# Sharded training on a 4 x H100 host, one call: the 1.5B GPT (ddp against fsdp under envkit, and the plain
# FSDP2 loop) on GPUs 0,1, beside the 6.7B GPT (auto, which shards it; ddp, which cannot hold it; the plain
# FSDP2 loop) on GPUs 2,3; then GPT-2 small's plain FSDP2 loop on GPUs 0,1. Results: benchmarks/RESULTS.md.
# Run from the repository root: bash benchmarks/device/sharded_1p5b_ddp_vs_fsdp_4gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
(
  export CUDA_VISIBLE_DEVICES=0,1
  timeout 330 $PY benchmarks/bench_ddp_scaling.py --size 1.5b --nproc 2 --steps 40 --set training.parallel=ddp --try training.parallel=fsdp
  timeout 150 $PY benchmarks/bench_plain_ddp.py --parallel fsdp --size 1.5b --nproc 2 --windows 3
  timeout 80 $PY benchmarks/bench_plain_ddp.py --parallel fsdp --size small --nproc 2
) > "$OUT/pair01.log" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=2,3
  timeout 400 $PY benchmarks/bench_ddp_scaling.py --size 6.7b --nproc 2 --steps 30 --try training.parallel=ddp
  timeout 150 $PY benchmarks/bench_plain_ddp.py --parallel fsdp --size 6.7b --nproc 2 --windows 2
) > "$OUT/pair23.log" 2>&1 &
wait
echo "done $(date -u)" | tee -a "$OUT/env.log"
grep -h -v "^\[\|^ *noise" "$OUT"/pair*.log | grep -E "proc|plain|failed|parallel|Error|error" | head -60
