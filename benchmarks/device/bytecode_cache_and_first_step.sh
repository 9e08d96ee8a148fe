#!/bin/bash
# One lease, in order: (1) torch's imports with no bytecode in a read-only site-packages (mounted so in a mount
# namespace of its own), before and after `envkit doctor --fix` writes it into envkit's cache (bench_bytecode_cache.py);
# (2) then, bytecode written in place, GPT-2 small deterministic as shipped beside the default run
# (bench_determinism_gpt2.py); (3) the first step of GPT-2 small for this tree against BASE (an earlier tree,
# unpacked by `git archive`), cold, warm and again REPEAT times (bench_time_to_first_step.py), and this tree with
# training.compile_scope=blocks (regional compilation under the profile's CUDA graphs), run before this tree's;
# with TESTS=1, the trainer's one-GPU tests last. Results: benchmarks/RESULTS.md, 2026-12-08.
# Run from the repository root: BASE=.base_tree bash benchmarks/device/bytecode_cache_and_first_step.sh OUTDIR
. benchmarks/device/common.sh "$@"
SP=$($PY -c "import site; print(site.getsitepackages()[0])")
echo "torch's bytecode in the image: $(ls "$SP/torch/__pycache__" 2>/dev/null | wc -l) files; PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE-unset}"
RO=(unshare -m sh -c 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"' "$SP")
"${RO[@]}" true 2>/dev/null || { echo "no private mount here: site-packages stays writable (doctor --fix writes in place)"; RO=(); }
timeout ${T_BYTE:-120} "${RO[@]}" $PY benchmarks/bench_bytecode_cache.py --runs ${RUNS:-2} > "$OUT/bytecode.log" 2>&1; echo "bytecode rc=$?"; cat "$OUT/bytecode.log" | tail -8
unset PYTHONDONTWRITEBYTECODE
s=$(date +%s); $PY -m compileall -q -j 16 "$SP" > /dev/null 2>&1; echo "bytecode written in place in $(( $(date +%s) - s )) s"
timeout ${T_DET:-110} $PY benchmarks/bench_determinism_gpt2.py --steps 60 --run default= --run det=training.deterministic=true \
  > "$OUT/determinism.log" 2>&1; echo "determinism rc=$?"; tail -8 "$OUT/determinism.log"
TT="--steps ${STEPS:-10} --repeat ${REPEAT:-1} --skip-plain"
[ -n "$BASE" ] && { timeout ${T_BASE:-90} $PY benchmarks/bench_time_to_first_step.py $TT --tree "$BASE" > "$OUT/ttfs_base.log" 2>&1; echo "ttfs base rc=$?"; }
timeout ${T_BLOCKS:-90} $PY benchmarks/bench_time_to_first_step.py $TT --set training.compile_scope=blocks > "$OUT/ttfs_blocks.log" 2>&1; echo "ttfs blocks rc=$?"
timeout ${T_NEW:-90} $PY benchmarks/bench_time_to_first_step.py $TT > "$OUT/ttfs_new.log" 2>&1; echo "ttfs new rc=$?"
for f in new base blocks; do echo "== $f"; grep -A12 "^  *first step  " "$OUT/ttfs_$f.log" | grep -v "compile phases" | head -8; done
grep -A22 "^warm0: where" "$OUT/ttfs_new.log" | head -24
grep -A22 "^warm0: where" "$OUT/ttfs_blocks.log" | head -24
grep -A22 "^warm0: where" "$OUT/ttfs_base.log" 2>/dev/null | head -24
[ "${TESTS:-0}" = 1 ] && { timeout ${T_TESTS:-150} $PY -m pytest -q -p no:cacheprovider -m gpu tests/train/test_train_gpu.py \
  tests/train/test_first_step_timing.py tests/train/test_data_on_device.py > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -5 "$OUT/gpu_tests.log"; }
echo "done $(date -u)" | tee -a "$OUT/env.log"
