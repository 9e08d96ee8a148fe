#!/bin/bash
# `envkit run` of a small CPU model with a torch that has no bytecode, in a site-packages mounted read-only (a mount
# namespace of its own) and PYTHONDONTWRITEBYTECODE=1, twice before and twice after `envkit doctor --fix` writes the
# bytecode into envkit's cache: the whole command's seconds and the trainer's `import torch` phase (ENVKIT_TIMING).
# Needs root (or CAP_SYS_ADMIN) for the mount. Results: benchmarks/RESULTS.md, 2026-12-08.
#   python3 -m venv /tmp/bc_venv && /tmp/bc_venv/bin/pip install --no-compile torch click packaging rich requests pyyaml
#   bash benchmarks/bytecode_cache_end_to_end.sh /tmp/bc_venv/bin/python
P=${1:?the python of a venv whose torch has no bytecode}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SP=$("$P" -c "import site; print(site.getsitepackages()[0])")
WORK=$(mktemp -d)
cat > "$WORK/t.yaml" <<'YAML'
experiment: {name: t}
dataset: {type: synthetic, task: teacher, input_dim: 8, num_samples: 256}
model: {type: mlp, hidden: 16, depth: 1}
training: {max_steps: 2, batch_size: 16}
eval: {every_steps: 0, batches: 1}
device: {type: cpu}
YAML
cat > "$WORK/inside.sh" <<'INSIDE'
set -e
cd "$WORK"
export PYTHONDONTWRITEBYTECODE=1 ENVKIT_CACHE_DIR="$WORK/cache" PYTHONPATH="$ROOT" ENVKIT_TIMING=1
phase() { awk '$1=="envkit-timing" {t=$2; $1=""; $2=""; sub(/^  /, ""); if (prev) d=t-prev; prev=t; if (index($0, "the trainer'"'"'s modules imported")==1) printf "import torch %.2f s, ", d}'; }
run() { rm -rf runs; s=$(date +%s.%N); "$P" -m envkit run t.yaml --profile cpu --json 2>&1 >/dev/null | phase; echo "the command $(echo "$(date +%s.%N) - $s" | bc) s ($1)"; }
run before; run before
"$P" -m envkit doctor --fix --python "$P" --json | "$P" -c "import json, sys; print('doctor --fix:', json.load(sys.stdin)['fixed'])"
run after; run after
INSIDE
WORK=$WORK ROOT=$ROOT P=$P unshare -m sh -c 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"' "$SP" bash "$WORK/inside.sh"
rm -rf "$WORK"
