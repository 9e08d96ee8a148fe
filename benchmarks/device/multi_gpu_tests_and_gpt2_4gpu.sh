#!/bin/bash
# Several GPUs on a 4 x H100 host, one call: on GPUs 0,1 the multi-GPU tests (tests/train/test_multi_gpu.py), then GPT-2 small
# deterministic under DDP (default, deterministic, deterministic again, `envkit reproduce`); on GPUs 2,3 the 6.7B GPT
# (auto, which shards it) and the same under ddp (which cannot hold it), then the 1.5B GPT sharded at batch 16.
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/multi_gpu_tests_and_gpt2_4gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
# envkit reproduce restores the code from git: make this copy a repository of its own
if [ ! -d .git ]; then git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "device copy"; fi
VENV=$($PY -c "import sys; print(sys.prefix)")
(
  export CUDA_VISIBLE_DEVICES=0,1
  timeout 200 $PY -m pytest -q -p no:cacheprovider tests/train/test_multi_gpu.py -x 2>&1 | tail -15
  timeout 330 $PY benchmarks/bench_reproduce.py --models gpt2 --nproc 2 --steps 60 --repeat --reproduce det --venv "$VENV" --out /tmp/det-ddp
) > "$OUT/pair01.log" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=2,3
  timeout 260 $PY benchmarks/bench_ddp_scaling.py --size 6.7b --nproc 2 --steps 30
  timeout 120 $PY benchmarks/bench_ddp_scaling.py --size 6.7b --nproc 2 --steps 10 --set training.parallel=ddp
  timeout 150 $PY benchmarks/bench_ddp_scaling.py --size 1.5b --batch 16 --nproc 2 --steps 40 --set training.parallel=fsdp
) > "$OUT/pair23.log" 2>&1 &
wait
echo "done $(date -u)" | tee -a "$OUT/env.log"
grep -h -v "^ *noise" "$OUT"/pair*.log | grep -v "^\[" | head -80
