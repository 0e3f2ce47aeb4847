#!/usr/bin/env bash
# One call on a lent H100 (the device tool gives ~15 min, start included): the H200 campaigns' configurations
# again on a second Hopper GPU, so that (a) a held-out H200 or H100 has eager PyTorch rows of its own setting
# on the other card (leave_gpu_out) and (b) the same CNN and setting measured on two GPUs that differ only in
# memory (same 132 SMs and clocks; HBM3 3.35 TB/s vs HBM3e 4.8 TB/s) tests the physics' bandwidth scaling.
# Each phase is time-boxed by `--time-budget-s` (configurations not started are listed as not_run) and every
# CSV is rewritten after each configuration under $OUT, so a time-out loses nothing.
#
#   bash benchmarks/device/h100_campaign.sh            # on the device machine (OUT is set there)
#
# Phases (model list: benchmarks/device/hopper_models.txt, as for the H200 rows of data/own/):
#   A  inference, amp_fp16, NCHW, batch 256, 15 timed steps (pairs h200_20261126_infer_amp_fp16_bs256_*)
#   G1 inference, fp32, NCHW, batch 1, eager and cuda_graphs, 30 timed steps (pairs h200_20261127_graphs_fp32_*)
source benchmarks/device/campaign_lib.sh
log_environment

ITERS=15 phase infer_amp_fp16_bs256 "${A:-300}" --models "$ALL" --batch-sizes 256 --precisions amp_fp16 \
  --layout nchw
ITERS=30 phase graphs_fp32_bs1 "${G1:-140}" --models "$ALL" --batch-sizes 1 --precisions fp32 --layout nchw \
  --compile eager,cuda_graphs
log_summary
grep -v "\[not_run\]" "$LOG" | tail -40
