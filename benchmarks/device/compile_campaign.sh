#!/usr/bin/env bash
# One call on a lent GPU (issue 20): a fusing runtime at batch 1. The same CNN timed eager, torch.compile
# (Inductor, default mode, as timm's benchmark compiles) and as a CUDA-graph replay back to back on one machine,
# and the kernels each runtime launched per step counted from a profiler trace, so that the fusion rules of
# src/features/kernels.py meet the kernel counts that really ran.
#
#   bash benchmarks/device/compile_campaign.sh            # on the device machine (OUT is set there)
#
# Phases (model list: benchmarks/device/compile_models.txt, CNNs that also have TensorRT rows in our table):
#   W  warm compile, WORKERS processes at once: `_target` compiles each (model, precision) with torch.compile
#      into a shared Inductor cache and writes one step's trace; the same for eager (kernel counts only: the
#      processes share the GPU, so these traces' durations are not timings)
#   C  inference, batch 1, NCHW, fp32 and amp_fp16, eager / torch_compile / cuda_graphs, 30 timed steps, one
#      process (torch.compile now loads from the warm cache)
#   S  kernel counts of every trace (`python -m src.profiling traces`) and the traces packed in one archive
ITERS=${ITERS:-30}
source benchmarks/device/campaign_lib.sh
CLIST=${CLIST:-benchmarks/device/compile_models.txt}
WORKERS=${WORKERS:-8}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/cnnperf_inductor}
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2}
TR=$OUT/traces
mkdir -p "$TR"
log_environment

warm_one() {  # model precision compile: compile (if asked), warm up, trace one step
  local slug
  slug=$(echo "$1_$2_$3" | tr -c 'A-Za-z0-9_.\n-' '-')
  timeout 240 $PY -m src.profiling _target --model "$1" --batch-size 1 --precision "$2" --layout nchw \
    --compile "$3" --device "$DEV" --warmup 2 --info-out "$TR/$slug.info.json" --trace-out "$TR/$slug.json" \
    >"$TR/$slug.log" 2>&1 || { echo "warm $1 $2 $3: rc=$?"; tail -3 "$TR/$slug.log"; rm -f "$TR/$slug.json"; }
  rm -f "$TR/$slug.log"
  [ -e "$TR/$slug.json" ] || rm -f "$TR/$slug.info.json"
}
export -f warm_one
export PY DEV TR
echo "== W: budget ${W:-200}s, $WORKERS workers, start $(date -u +%T)" >>"$LOG"
while read -r m; do
  for c in torch_compile eager; do for p in fp32 amp_fp16; do echo "$m $p $c"; done; done
done <"$CLIST" >"$OUT/work.txt"
timeout "${W:-200}" xargs -P "$WORKERS" -L 1 bash -c 'warm_one "$0" "$1" "$2"' <"$OUT/work.txt" >>"$LOG" 2>&1
echo "== W: rc=$? end $(date -u +%T); traces: $(ls "$TR"/*.info.json 2>/dev/null | wc -l)" >>"$LOG"
rm -f "$OUT/work.txt"
pkill -f "src.profiling _target" 2>/dev/null
sleep 3
# a worker killed by W's timeout may leave a half-written trace: keep only pairs that parse
for f in "$TR"/*.info.json; do
  [ -e "$f" ] || continue
  t=${f%.info.json}.json
  $PY -c "import json,sys; json.load(open(sys.argv[1]))" "$t" 2>/dev/null || rm -f "$f" "$t"
done

phase compile_bs1 "${C:-300}" --models "$(paste -sd, "$CLIST")" --batch-sizes 1 --precisions fp32,amp_fp16 \
  --layout nchw --compile eager,torch_compile,cuda_graphs

echo "== S: start $(date -u +%T)" >>"$LOG"
$PY -m src.profiling traces "$TR" --out "$OUT/${TAG}_kernel_counts_bs1.csv" >>"$LOG" 2>&1
# the first model's fp32 traces alone, small enough for a test fixture (the prefix is read before `cd`: CLIST
# may be a relative path)
first=$(head -1 "$CLIST" | tr -c 'A-Za-z0-9_.\n-' '-')
fixture=$(cd "$TR" && ls | grep -E "^${first}_fp32_" || true)
[ -n "$fixture" ] && tar -czf "$OUT/${TAG}_fixture_traces.tar.gz" -C "$TR" $fixture
tar -czf "$OUT/${TAG}_traces_bs1.tar.gz" -C "$OUT" traces && rm -rf "$TR"
log_summary
grep -v "\[not_run\]" "$LOG" | tail -40
