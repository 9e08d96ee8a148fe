#!/bin/bash
# Throughput before and after the renovation, one GPU, one lease: GPT-2 small (bench_trainer.py, batch 16:
# envkit's loop and the plain loop) and ResNet-18 CIFAR (bench_resnet_cifar.py, envkit's loop), each run from the tree
# before (.gpu/before: `git archive 0280973 envkit templates profiles benchmarks pyproject.toml`, carried) and from this
# checkout, alternating. Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/throughput_before_after_renovation.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
for tree in .gpu/before . ; do
  (cd "$tree" && PYTHONPATH=$PWD timeout 170 $PY benchmarks/bench_trainer.py --batch 16 --steps 60 2>&1 | tail -n 8) | sed "s#^#[$tree] #" | tee -a "$OUT/gpt.log"
done
for tree in .gpu/before . ; do
  (cd "$tree" && PYTHONPATH=$PWD timeout 110 $PY benchmarks/bench_resnet_cifar.py --loops envkit --repeats 1 2>&1 | tail -n 6) | sed "s#^#[$tree] #" | tee -a "$OUT/cifar.log"
done
echo "done $(date -u)" | tee -a "$OUT/env.log"
