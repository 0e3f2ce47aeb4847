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
source benchmarks/device/campaign_lib.sh
FIRST30=$(head -30 "$LIST" | paste -sd,)
export PATH=$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)
log_environment
{ command -v ncu || echo "ncu not on PATH"; } >>"$LOG" 2>&1

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
log_summary
grep -v "\[not_run\]" "$LOG" | tail -60
