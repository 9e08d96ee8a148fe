#!/bin/bash
# doctor's bytecode check on the lent image as it comes (torch without bytecode, PYTHONDONTWRITEBYTECODE=1): the check,
# its fix run exactly as printed, the check again; `import torch` timed before and after (3 fresh processes each).
# Results: benchmarks/RESULTS.md. Run from the repository root: bash benchmarks/device/doctor_bytecode_check.sh OUTDIR
. benchmarks/device/common.sh "$@"
export CUDA_VISIBLE_DEVICES=0
t() { for i in 1 2 3; do /usr/bin/time -f "%e" $PY -c "import torch" 2>&1 | tail -1; done | sort -n | sed -n 2p; }
echo "import torch, median of 3, before: $(t) s" | tee "$OUT/timing.log"
$PY -m envkit doctor 2>&1 | tee "$OUT/doctor_before.log" | grep -A1 "bytecode"
FIX=$($PY -m envkit doctor --json | $PY -c "import json,sys; print(next(c for c in json.load(sys.stdin)['checks'] if c['id']=='bytecode').get('fix') or '')")
echo "running the fix: $FIX" | tee -a "$OUT/timing.log"
/usr/bin/time -f "the fix took %e s" bash -c "$FIX" 2>&1 | tail -1 | tee -a "$OUT/timing.log"
$PY -m envkit doctor 2>&1 | tee "$OUT/doctor_after.log" | grep "bytecode\|passed"
echo "import torch, median of 3, after: $(t) s" | tee -a "$OUT/timing.log"
echo "done $(date -u)" | tee -a "$OUT/env.log"
