# Sourced by the callN.sh scripts (run from the repository root, OUTDIR as $1): the output folder, the
# environment every run shares, the host's GPUs and torch in env.log, and gpt2_bench_config, which writes
# random GPT-2 tokens and a GPT-2 small config at batch 16 without accumulation for `envkit bench` (/tmp/g2/gpt2.yaml).
set -o pipefail
OUT=${1:-${OUT:-/tmp/out}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
PY=${PY:-python3}
# A warm machine may still run an earlier call's processes (a run cut by `timeout` whose torchrun workers linger, seen
# holding 123 GB of each GPU into the next call): stop them and wait for the GPUs to be free, or say who holds them.
pkill -9 -f "envkit_child.py|torch.distributed.run|bench_time_to_first_step|bench_ddp_scaling" 2>/dev/null
for _ in $(seq 30); do [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && break; sleep 1; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null | sed 's/^/still on a GPU: /'
{ date -u; nvidia-smi -L; $PY -c "import torch; print(torch.__version__, torch.cuda.device_count())"; } 2>&1 | tee "$OUT/env.log"

gpt2_bench_config() {  # $1: tokens per file (1 << 22 by default)
  mkdir -p /tmp/g2/data/openwebtext
  $PY -c "
import torch, pathlib; from envkit.train.data.tokens import write_tokens
g = torch.Generator().manual_seed(0); d = pathlib.Path('/tmp/g2/data/openwebtext')
for n in ('train.bin', 'val.bin'): write_tokens(d / n, torch.randint(50304, (${1:-4194304},), generator=g), 'uint16')"
  sed 's/grad_accum: 16 /grad_accum: 1  /; s/batch_size: 32 /batch_size: 16 /' templates/train/gpt2_small_tokens.yaml > /tmp/g2/gpt2.yaml
}
