#!/usr/bin/env bash
# One call on a lent GPU (the device tool gives ~15 min, start included): own timing rows in priority order,
# each phase time-boxed by `--time-budget-s` (configurations not started are listed as not_run), every CSV
# rewritten after each configuration under $OUT so a time-out loses nothing, then a short Nsight Compute phase.
#
#   bash benchmarks/device/hopper_campaign.sh              # on the device machine (OUT is set there)
#   OUT=/tmp/o DEV=cpu A=5 B=5 C=5 bash benchmarks/device/hopper_campaign.sh   # dry run of the flow on a CPU
#
# Phases (model list: benchmarks/device/hopper_models.txt, the timm CNN families of our measurement table
# round-robin, two models each, with the 34 public torchvision CNNs interleaved):
#   A  inference, amp_fp16, NCHW, batch 256 (timm's benchmark setting: comparable with the other GPUs' rows)
#   B  inference, fp32, batch 1 (the launch-bound regime that the public eager sources barely cover)
#   C  training step, amp_fp16, NHWC, batch 128, the first 30 models
#   N  Nsight Compute: tiny CNN eager + torch.compile (Triton PTX kept) and resnet18, batch 1
set -u
: "${OUT:?set OUT to the folder whose files come back}"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
DEV=${DEV:-cuda}
LIST=benchmarks/device/hopper_models.txt
ALL=$(paste -sd, "$LIST")
FIRST30=$(head -30 "$LIST" | paste -sd,)
LOG=$OUT/log.txt
TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z_' | tr -cd 'a-z0-9_')
TAG=${TAG:-$DEV}
export PATH=$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,power.limit \
    --format=csv 2>&1 || true
  $PY -c "import torch, timm, torchvision; print('torch', torch.__version__, 'timm', timm.__version__,
'torchvision', torchvision.__version__, 'cudnn', torch.backends.cudnn.version())" 2>&1
  command -v ncu || echo "ncu not on PATH"
} >>"$LOG" 2>&1

phase() {  # name budget_s args...
  local name=$1 budget=$2
  shift 2
  echo "== $name: budget ${budget}s, start $(date -u +%T)" >>"$LOG"
  timeout $((budget + 90)) $PY -m src.profiling run --device "$DEV" --warmup 3 --iters 15 --no-gmacs \
    --no-progress --time-budget-s "$budget" --out "$OUT/${TAG}_${name}.csv" "$@" >>"$LOG" 2>&1
  echo "== $name: rc=$? end $(date -u +%T)" >>"$LOG"
}

phase infer_amp_fp16_bs256 "${A:-190}" --models "$ALL" --batch-sizes 256 --precisions amp_fp16 --layout nchw
phase infer_fp32_bs1 "${B:-120}" --models "$ALL" --batch-sizes 1 --precisions fp32 --layout nchw
phase train_amp_fp16_bs128 "${C:-70}" --models "$FIRST30" --batch-sizes 128 --precisions amp_fp16 \
  --layout nhwc --mode training

NCU_DIR=/tmp/cnnperf_ncu/${TAG}
echo "== ncu: start $(date -u +%T)" >>"$LOG"
timeout "${N:-75}" $PY -m src.profiling ncu --device "$DEV" --models py:tests.profiling.tinynets:tiny_cnn \
  --batch-sizes 8 --compile eager,torch_compile --keep-ptx --warmup 2 --timeout 60 --no-progress \
  --out-dir "$NCU_DIR/tiny" >>"$LOG" 2>&1
echo "== ncu tiny: rc=$? $(date -u +%T)" >>"$LOG"
timeout "${N2:-60}" $PY -m src.profiling ncu --device "$DEV" --models torchvision:resnet18 --batch-sizes 1 \
  --warmup 2 --timeout 50 --no-progress --out-dir "$NCU_DIR/resnet18" >>"$LOG" 2>&1
echo "== ncu resnet18: rc=$? $(date -u +%T)" >>"$LOG"
tar czf "$OUT/${TAG}_ncu.tgz" -C /tmp/cnnperf_ncu "$TAG" 2>>"$LOG" || true
{
  echo "== summary $(date -u +%T)"
  for f in "$OUT"/*.csv; do
    [ -e "$f" ] || continue
    side=${f%.csv}/failures.csv
    echo "$(basename "$f"): $(($(wc -l <"$f") - 1)) rows; failures file: $( [ -e "$side" ] && \
      cut -d, -f8 "$side" | tail -n +2 | sort | uniq -c | tr '\n' ' ' || echo none)"
  done
} >>"$LOG" 2>&1
grep -v "\[not_run\]" "$LOG" | tail -60
