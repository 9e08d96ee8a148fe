#!/bin/bash
# `envkit reproduce` through its snapshot and plan on a GPU host: a deterministic GPT run on the
# GPU reproduced there (a folder this machine wrote: no question, held to identical), the same folder
# with its results edited (shown and refused without a yes, exit 2), a CPU run reproduced on the GPU
# (benchmarks/reproduce_cpu_run_on_gpu.sh), and the hostile-folder fuzzer on that host's Python.
# The device machine reaches no index: the reproductions reuse the image's interpreter (--venv, after
# reproduce's drift check). Run from the repository root: bash benchmarks/device/reproduce_on_gpu.sh OUTDIR
. benchmarks/device/common.sh "$@"
venv=$($PY -c 'import sys; print(sys.prefix)')
work=$(mktemp -d)
secs() { $PY -c "import time,sys; print(round(time.time() - float(sys.argv[1]), 1))" "$1"; }
( cd "$work" && $PY -m envkit init gpt.yaml --template gpt_quick_test >/dev/null
  s=$(date +%s.%N)
  $PY -m envkit run gpt.yaml --set training.max_steps=200 --set training.deterministic=true --run-id gpu > "$OUT/run.log" 2>&1
  echo "run rc=$? in $(secs $s) s"
  run=$(ls -d runs/*/gpu)
  s=$(date +%s.%N)
  $PY -m envkit reproduce "$run" --venv "$venv" --json > "$OUT/repro.json" 2> "$OUT/repro.err"
  echo "reproduce rc=$? in $(secs $s) s"
  $PY - "$OUT/repro.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
f = d["facts"]["reproduction"]
print(f"  {d['outcome']} over {d['steps_compared']} steps, consent {d['consent']}; {f['device_name']}, torch {f['torch']}, "
      f"deterministic {f['deterministic']}; why: {d['why']}")
print("  " + ", ".join(f"{k} {'identical' if m['identical'] else m['max_abs']}" for k, m in sorted(d["metrics"].items())))
PY
  cp -r "$run" edited && $PY - edited/summary.json <<'PY'
import json, sys
p = sys.argv[1]; d = json.load(open(p)); d["device"] = "cpu"; json.dump(d, open(p, "w"))
PY
  mkdir -p runs/x && mv edited runs/x/edited
  $PY -m envkit reproduce runs/x/edited --venv "$venv" > "$OUT/edited.out" 2> "$OUT/edited.err"
  echo "edited results: rc=$? ($(tail -1 "$OUT/edited.err" | cut -c1-160))"; sed 's/^/  /' "$OUT/edited.out" | cut -c1-200
)
timeout 400 bash benchmarks/reproduce_cpu_run_on_gpu.sh 200 2>&1 | tail -12
s=$(date +%s)
timeout 200 $PY benchmarks/fuzz_run_folders.py --cases 1000 --seed 7 2>&1 | tail -6
echo "fuzzer: $(( $(date +%s) - s )) s"
echo "done $(date -u)" | tee -a "$OUT/env.log"
