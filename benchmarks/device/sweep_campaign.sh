#!/usr/bin/env bash
# One call on a lent GPU (issue 12): the batch sizes between the launch-bound batch 1 and the throughput batch 256
# on a Hopper card, in three precisions, and training steps. Our table's Hopper rows sit at batch 1 (fp32) and
# 256 (amp_fp16) only, pure fp16 has no datacenter row, and training has 11; so the crossover from host-bound to
# compute-bound, and pure fp16 against AMP on one machine, were never measured on the newest GPUs.
#
#   bash benchmarks/device/sweep_campaign.sh            # on the device machine (OUT is set there)
#   OUT=/tmp/o DEV=cpu S=20 T=20 SLIST=... bash benchmarks/device/sweep_campaign.sh   # dry run on a CPU
#
# Phases (model list: benchmarks/device/compile_models.txt, CNNs that most sources measure), each time-boxed by
# `--time-budget-s` (configurations not started are listed as not_run), model-major, CSVs rewritten after each
# configuration under $OUT so a time-out loses nothing:
#   S  inference, eager, NCHW, fp32 / amp_fp16 / fp16 (the model cast to half), batch 2, 8, 32, 128
#   T  training step (SGD), eager, NCHW, fp32 and amp_fp16, batch 64
source benchmarks/device/campaign_lib.sh
SLIST=${SLIST:-$(paste -sd, benchmarks/device/compile_models.txt)}
log_environment

phase sweep_infer_bs2_128 "${S:-280}" --models "$SLIST" --batch-sizes 2,8,32,128 \
  --precisions fp32,amp_fp16,fp16 --layout nchw
phase train_fp32_amp_bs64 "${T:-170}" --models "$SLIST" --batch-sizes 64 --precisions fp32,amp_fp16 \
  --layout nchw --mode training
log_summary
tail -40 "$LOG"
