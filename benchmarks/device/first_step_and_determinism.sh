#!/bin/bash
# The first step's breakdown and deterministic attention in one lease, the parts in the order of what matters most, each with its own limit (what a part wrote
# under OUTDIR comes back when it is cut): the first step's breakdown with the switches tried against it
# (first_step_breakdown.sh without the floors and the AOT path, T_TTFS s), GPT-2 small's deterministic runs and
# then the attention kernels in what is left of TOTAL s (deterministic_attention.sh), then torch's AOT path
# against the mega cache if time is left. Run from the repository root: bash benchmarks/device/first_step_and_determinism.sh OUTDIR
start=$(date +%s)
FLOORS=0 AOT=0 REPEAT=${REPEAT:-1} STEPS=${STEPS:-10} T_TTFS=${T_TTFS:-195} bash benchmarks/device/first_step_breakdown.sh "$@"
left=$(( ${TOTAL:-390} - ($(date +%s) - start) ))
T_DET=$(( left < ${T_DET:-165} ? left : ${T_DET:-165} )) T_MICRO=$(( left - ${T_DET:-165} > 20 ? left - ${T_DET:-165} : 1 )) STEPS=60 \
  bash benchmarks/device/deterministic_attention.sh "$@"
left=$(( ${TOTAL:-390} - ($(date +%s) - start) ))
OUT=${1:-${OUT:-/tmp/out}}
if [ $left -gt 60 ]; then
  timeout $left python3 benchmarks/bench_aot_first_step.py > "$OUT/aot.log" 2>&1; echo "aot rc=$? (limit $left s)"; tail -8 "$OUT/aot.log"
else echo "no time left for the AOT path ($left s)"; fi
