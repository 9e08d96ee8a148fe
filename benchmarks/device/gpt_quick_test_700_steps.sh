#!/bin/bash
# The gpt quick test at 700 steps (was 1000) on CUDA: the GPU test that runs it (bf16, compile), then the template as
# shipped at seeds 1337, 1, 2, 3 (precision auto: bf16; compile auto: on), each run's eval lines and summary.
# Run from the repository root: bash benchmarks/device/gpt_quick_test_700_steps.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
SITE=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
$PY -m compileall -q -j 16 "$SITE" > /dev/null 2>&1
timeout 240 $PY -m pytest -q -p no:cacheprovider -m gpu -rs tests/train/test_train_gpu.py -k quick_test_bf16 2>&1 | tail -n 5 | tee "$OUT/gpu_test.log"
for seed in 1337 1 2 3; do
  d=/tmp/q$seed; rm -rf $d; mkdir -p $d
  timeout 200 $PY -m envkit run templates/train/gpt_quick_test.yaml --run-id r$seed --set experiment.seed=$seed \
     --set experiment.output_dir=$d --set eval.every_steps=50 --set logging.progress=none > $d/out.txt 2>&1
  echo "seed $seed rc $?" | tee -a "$OUT/seeds.log"
  $PY -c "
import json, sys; d = sys.argv[1]
rows = [json.loads(l) for l in open(d + '/metrics.jsonl')]
print('  evals (step, val loss, accuracy):', [(r['step'], round(r['val_loss'], 4), r.get('accuracy')) for r in rows if 'val_loss' in r])
s = json.load(open(d + '/summary.json'))
print('  summary:', {k: s.get(k) for k in ('status', 'best_val_loss', 'accuracy', 'precision', 'compile', 'tokens_per_second')})
" $d/gpt-quick-test/r$seed 2>&1 | tee -a "$OUT/seeds.log"
done
echo "done $(date -u)" | tee -a "$OUT/env.log"
