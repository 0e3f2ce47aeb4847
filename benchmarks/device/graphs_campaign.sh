#!/usr/bin/env bash
# One call on a lent GPU: eager vs CUDA-graph pairs at batch 1 (issue 20: the launch cost a deploying runtime
# sheds), the same CNN built and timed both ways back to back, each phase time-boxed by `--time-budget-s`
# (configurations not started are listed as not_run), every CSV rewritten after each configuration under $OUT.
#
#   bash benchmarks/device/graphs_campaign.sh            # on the device machine (OUT is set there)
#
# Phases (model list: benchmarks/device/hopper_models.txt, timm CNN families round-robin + torchvision CNNs):
#   T  the harness's CUDA tests (graph replay == eager forward), if pytest is installed there
#   G1 inference, fp32, NCHW, batch 1, eager and cuda_graphs (fp32 eager batch 1 repeats the 2026-11-26 run)
#   G2 inference, amp_fp16, NCHW, batch 1, eager and cuda_graphs
set -u
: "${OUT:?set OUT to the folder whose files come back}"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
LIST=benchmarks/device/hopper_models.txt
ALL=$(paste -sd, "$LIST")
LOG=$OUT/log.txt
TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z_' | tr -cd 'a-z0-9_')
TAG=${TAG:-cuda}
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,power.limit \
    --format=csv 2>&1 || true
  $PY -c "import torch, timm, torchvision; print('torch', torch.__version__, 'timm', timm.__version__,
'torchvision', torchvision.__version__, 'cudnn', torch.backends.cudnn.version())" 2>&1
  echo "== T: start $(date -u +%T)"
  timeout 90 $PY -m pytest -q -p no:cacheprovider tests/profiling/test_harness_cpu.py -k cuda 2>&1 | tail -5
  echo "== T: rc=$? end $(date -u +%T)"
} >>"$LOG" 2>&1

phase() {  # name budget_s args...
  local name=$1 budget=$2
  shift 2
  echo "== $name: budget ${budget}s, start $(date -u +%T)" >>"$LOG"
  timeout $((budget + 90)) $PY -m src.profiling run --device cuda --warmup 3 --iters 30 --no-gmacs \
    --no-progress --time-budget-s "$budget" --out "$OUT/${TAG}_${name}.csv" "$@" 2>&1 \
    | grep -v "\[not_run\]" >>"$LOG"
  echo "== $name: rc=${PIPESTATUS[0]} end $(date -u +%T)" >>"$LOG"
}

phase graphs_fp32_bs1 "${G1:-230}" --models "$ALL" --batch-sizes 1 --precisions fp32 --layout nchw \
  --compile eager,cuda_graphs
phase graphs_amp_fp16_bs1 "${G2:-160}" --models "$ALL" --batch-sizes 1 --precisions amp_fp16 --layout nchw \
  --compile eager,cuda_graphs
{
  echo "== summary $(date -u +%T)"
  for f in "$OUT"/*.csv; do
    [ -e "$f" ] || continue
    side=${f%.csv}/failures.csv
    echo "$(basename "$f"): $(($(wc -l <"$f") - 1)) rows; failures: $( [ -e "$side" ] && \
      cut -d, -f8 "$side" | tail -n +2 | sort | uniq -c | tr '\n' ' ' || echo none)"
  done
} >>"$LOG" 2>&1
tail -40 "$LOG"
