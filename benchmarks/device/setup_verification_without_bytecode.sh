#!/bin/bash
# 1. What setup's verification does on a CUDA host whose torch has no bytecode (the lent image ships none
#    and sets PYTHONDONTWRITEBYTECODE=1): the installers no longer byte-compile all of torch; the
#    verification's `import torch` writes the bytecode of what it loads and, on CUDA, of torch.compile's
#    modules. The floor (torch, torch.compile's modules, CUDA's start) before and after, twice each.
# 2. The gpt quick test (templates/train/gpt_quick_test.yaml) at 1000 steps (as shipped until now) and 600, at
#    seeds 1337, 1, 2, 3 on this GPU (bf16, compiled), eval every 100 steps: accuracy on the held-out sums.
# QUICK_ONLY=1: part 2 alone. Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/setup_verification_without_bytecode.sh OUTDIR
. benchmarks/device/common.sh "$@"
SITE=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
count() { find "$SITE/torch" -name '*.pyc' | wc -l; }
floor() {
  for i in 1 2; do
    s=$(date +%s%N)
    $PY -c "import torch, torch._dynamo, torch._inductor.compile_fx; torch.cuda.init()"
    echo "$1, run $i: $(( ($(date +%s%N) - s) / 1000000 )) ms"
  done
}
[ -n "$QUICK_ONLY" ] || {
  echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}; torch's .pyc files before: $(count) (of $(find "$SITE/torch" -name '*.py' | wc -l) modules)"
  floor "no bytecode: import torch + torch.compile's modules + CUDA's start"
  s=$(date +%s%N)
  PYTHONDONTWRITEBYTECODE=1 $PY -c "import sys, json; from envkit.install.act.execute import verify; r = verify(sys.executable, {}, 'cuda'); print('verify:', json.dumps({k: r.get(k) for k in ('ok', 'problems', 'torch', 'cuda')}))"
  echo "the verification took $(( ($(date +%s%N) - s) / 1000000 )) ms; torch's .pyc files after: $(count)"
  floor "after the verification"
  $PY -m envkit doctor 2>&1 | grep -i "bytecode"
} 2>&1 | tee "$OUT/bytecode.log"

REPO=$PWD
cd /tmp && rm -rf qt && mkdir qt && cd qt
for steps in 1000 600; do
  for seed in 1337 1 2 3; do
    s=$(date +%s%N)
    $PY -m envkit run "$REPO/templates/train/gpt_quick_test.yaml" --run-id "s$seed-$steps" --set experiment.seed=$seed \
      --set training.max_steps=$steps --set eval.every_steps=100 > "$OUT/quick_${steps}_$seed.log" 2>&1
    echo "max_steps $steps seed $seed: rc=$? $(( ($(date +%s%N) - s) / 1000000 )) ms; $(grep -o 'eval step [0-9]*: val loss [0-9.]*, accuracy [0-9.]*' "$OUT/quick_${steps}_$seed.log" | sed 's/eval step //; s/val loss //; s/accuracy //' | tr '\n' ' ')" | tee -a "$OUT/quick.log"
  done
done
cd "$REPO"
echo "done $(date -u)" | tee -a "$OUT/env.log"
