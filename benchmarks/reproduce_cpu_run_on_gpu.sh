#!/usr/bin/env bash
# A CPU run reproduced on the GPU of the same CUDA box (#42, "another machine" in its nearest form
# here: the device machine reaches no index, so a fresh venv of another torch build cannot be made
# there; the venv that trained the CPU run is reused, after `reproduce`'s drift check).
# The original trains with the GPU hidden (CUDA_VISIBLE_DEVICES=: the cpu profile); the reproduction on the GPU (--device cuda)
# and is held to the across-devices bound (envkit/reproduce/verdict.py). Prints one line per template.
# Usage: bash benchmarks/reproduce_cpu_run_on_gpu.sh [STEPS]   (on a CUDA box; about 2 minutes)
set -euo pipefail
steps=${1:-200}
python=${PYTHON:-python}
venv=$("$python" -c 'import sys; print(sys.prefix)')
work=$(mktemp -d)
cd "$work"
for template in mlp_quick_test gpt_quick_test; do
  "$python" -m envkit init "$template.yaml" --template "$template" >/dev/null
  CUDA_VISIBLE_DEVICES= "$python" -m envkit run "$template.yaml" --set training.max_steps="$steps" --run-id cpu >/dev/null 2>&1
  run=$(ls -d runs/*/cpu | grep "${template//_/-}")
  set +e
  "$python" -m envkit reproduce "$run" --venv "$venv" --device cuda --json > "$template.json" 2> "$template.err"
  rc=$?
  set -e
  "$python" - "$template" "$rc" <<'PY'
import json, sys
name, rc = sys.argv[1], sys.argv[2]
try:
    d = json.load(open(f"{name}.json"))
except ValueError:
    print(name, "exit", rc, open(f"{name}.err").read()[-1500:]); raise SystemExit
f = d["facts"]
print(f"{name}: exit {rc} {d['outcome']} over {d['steps_compared']} steps; {f['original']['device']} -> {f['reproduction']['device']}"
      f" ({f['reproduction']['device_name']}, torch {f['reproduction']['torch']}); why: {d['why']}")
for k, m in sorted(d["metrics"].items()):
    print(f"  {k}: max |diff| {m['max_abs']:.3g} at step {m['at_step']} (first diff at {m['first_diff']}), tolerance {d['tolerance'].get(k, 0):.3g}")
print("  tolerance from:", d["tolerance_from"])
PY
done
