# Shared steps of the device campaigns (sourced by hopper_campaign.sh and graphs_campaign.sh, never run alone):
# the environment header, one time-boxed `src.profiling run` phase, and the per-file summary.
# Expects OUT (the folder whose files come back); reads PY, DEV and ITERS if set.
set -u
: "${OUT:?set OUT to the folder whose files come back}"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
DEV=${DEV:-cuda}
ITERS=${ITERS:-15}
LIST=benchmarks/device/hopper_models.txt
ALL=$(paste -sd, "$LIST")
LOG=$OUT/log.txt
TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z_' | tr -cd 'a-z0-9_')
TAG=${TAG:-$DEV}

log_environment() {  # GPU, clocks and software versions at the top of the log
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,power.limit \
      --format=csv 2>&1 || true
    $PY -c "import torch, timm, torchvision; print('torch', torch.__version__, 'timm', timm.__version__,
'torchvision', torchvision.__version__, 'cudnn', torch.backends.cudnn.version())" 2>&1
  } >>"$LOG" 2>&1
}

phase() {  # name budget_s args...: one `run` into $OUT/<tag>_<name>.csv, started configurations only in the log
  local name=$1 budget=$2
  shift 2
  echo "== $name: budget ${budget}s, start $(date -u +%T)" >>"$LOG"
  timeout $((budget + 90)) $PY -m src.profiling run --device "$DEV" --warmup 3 --iters "$ITERS" --no-gmacs \
    --no-progress --time-budget-s "$budget" --out "$OUT/${TAG}_${name}.csv" "$@" 2>&1 \
    | grep -v "\[not_run\]" >>"$LOG"
  echo "== $name: rc=${PIPESTATUS[0]} end $(date -u +%T)" >>"$LOG"
}

log_summary() {  # rows per CSV and failures by stage
  {
    echo "== summary $(date -u +%T)"
    for f in "$OUT"/*.csv; do
      [ -e "$f" ] || continue
      side=${f%.csv}/failures.csv
      echo "$(basename "$f"): $(($(wc -l <"$f") - 1)) rows; failures: $( [ -e "$side" ] && \
        cut -d, -f8 "$side" | tail -n +2 | sort | uniq -c | tr '\n' ' ' || echo none)"
    done
  } >>"$LOG" 2>&1
}
