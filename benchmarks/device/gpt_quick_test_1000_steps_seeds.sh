#!/bin/bash
# The gpt quick test's previous schedule (1000 steps, warm-up 100) on CUDA at seeds 1337, 1, 2, 3, against gpt_quick_test_700_steps.sh's
# 700 steps (same lease). Run from the repository root: bash benchmarks/device/gpt_quick_test_1000_steps_seeds.sh OUTDIR [STEPS WARMUP]
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
STEPS=${2:-1000}; WARM=${3:-100}
for seed in 1337 1 2 3; do
  d=/tmp/p$seed; rm -rf $d; mkdir -p $d
  timeout 200 $PY -m envkit run templates/train/gpt_quick_test.yaml --run-id r$seed --set experiment.seed=$seed \
     --set training.max_steps=$STEPS --set training.warmup_steps=$WARM \
     --set experiment.output_dir=$d --set eval.every_steps=50 --set logging.progress=none > $d/out.txt 2>&1
  echo "seed $seed steps $STEPS warm-up $WARM rc $?" | tee -a "$OUT/seeds.log"
  $PY -c "
import json, sys; d = sys.argv[1]
rows = [json.loads(l) for l in open(d + '/metrics.jsonl')]
print('  evals (step, val loss, accuracy):', [(r['step'], round(r['val_loss'], 3), round(r.get('accuracy'), 3)) for r in rows if 'val_loss' in r])
s = json.load(open(d + '/summary.json'))
print('  summary:', {k: s.get(k) for k in ('best_val_loss', 'accuracy', 'precision', 'compile')})
" $d/gpt-quick-test/r$seed 2>&1 | tee -a "$OUT/seeds.log"
done
