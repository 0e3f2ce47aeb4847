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
ITERS=${ITERS:-30}
source benchmarks/device/campaign_lib.sh
log_environment
{
  echo "== T: start $(date -u +%T)"
  timeout 90 $PY -m pytest -q -p no:cacheprovider tests/profiling/test_harness_cpu.py -k cuda 2>&1 | tail -5
  echo "== T: rc=$? end $(date -u +%T)"
} >>"$LOG" 2>&1

phase graphs_fp32_bs1 "${G1:-230}" --models "$ALL" --batch-sizes 1 --precisions fp32 --layout nchw \
  --compile eager,cuda_graphs
phase graphs_amp_fp16_bs1 "${G2:-160}" --models "$ALL" --batch-sizes 1 --precisions amp_fp16 --layout nchw \
  --compile eager,cuda_graphs
log_summary
tail -40 "$LOG"
