#!/bin/bash
# The first minute and the rest of the multi-GPU figures on a 4 x H100 host, one call. GPU 0: time to the first step
# (GPT-2 small, cold / warm / plain loop, then with training.compile_scope=blocks under compile_mode default); GPU 1: the
# GPU test that a second run compiles nothing new, then ResNet-18 CIFAR's time to the first step; GPUs 2,3: the 6.7B GPT
# (auto: sharded); then GPUs 0,1: `envkit bench`'s ladder with its ddp and fsdp rungs. Results: benchmarks/RESULTS.md.
# Run from the repository root: bash benchmarks/device/first_minute_multi_gpu_4gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 170 $PY benchmarks/bench_time_to_first_step.py --steps 60
  timeout 110 $PY benchmarks/bench_time_to_first_step.py --steps 60 --skip-plain --set training.compile_mode=default
) > "$OUT/first_gpt.log" 2>&1 &
A=$!
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 150 $PY -m pytest -q -p no:cacheprovider tests/train/test_train_gpu.py -k second_run 2>&1 | tail -8
  timeout 120 $PY benchmarks/bench_time_to_first_step.py --steps 60 --cifar --skip-plain
) > "$OUT/first_cifar.log" 2>&1 &
B=$!
(
  export CUDA_VISIBLE_DEVICES=2,3
  timeout 470 $PY benchmarks/bench_ddp_scaling.py --size 6.7b --nproc 2 --steps 20
) > "$OUT/big.log" 2>&1 &
wait $A $B
echo "first minute done $(date -u)" | tee -a "$OUT/env.log"
gpt2_bench_config
CUDA_VISIBLE_DEVICES=0,1 timeout 210 $PY -m envkit bench --config /tmp/g2/gpt2.yaml --baseline device --seconds 3 --budget 200s \
  --output "$OUT/ladder.json" > "$OUT/bench.log" 2>&1
wait
echo "done $(date -u)" | tee -a "$OUT/env.log"
tail -n 25 "$OUT"/first_*.log; grep -v "^ *noise" "$OUT/big.log" | grep -v "^\["; tail -n 30 "$OUT/bench.log"
