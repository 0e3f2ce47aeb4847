"""The estimated GPU memory of one step, so an answer says whether the configuration fits on the GPU at all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .engineer import bytes_per_element, lookup

# Working set of a step (`working_set_gb`): training keeps gradients (bytes per element of the precision),
# optimizer state (Adam: two fp32 moments, 8 bytes per parameter; SGD with momentum needs 4) and, under
# mixed precision (amp_*), fp32 master weights (4 bytes); and it stores every activation for the backward pass.
OPTIMIZER_STATE_BYTES = 8.0
MASTER_WEIGHT_BYTES = 4.0
# Inference frees each activation once consumed: the live part is the largest layer's input + output. Over the
# 1,073 (CNN, size) pairs of our kernel profiles the largest kernel's input + output is 3 % to 86 % (median 20 %)
# of the whole-network activation count; 5 % (their 5th percentile) keeps `fits_in_memory: false` a
# near-certain out-of-memory (no measured inference row of data/processed/dataset.parquet is flagged).
INFERENCE_LIVE_FRACTION = 0.05
GIB = float(2**30)


def working_set_gb(cols: Mapping[str, Any]) -> np.ndarray:
    """Estimated GPU memory of one step (GiB): weights + activations x batch at the row's precision; training
    adds gradients, optimizer state, fp32 master weights under AMP, and keeps every activation (constants above)."""
    precision = np.asarray(cols["precision"], dtype=object)
    bpe = bytes_per_element(precision)
    training = np.asarray(cols["mode"], dtype=object) == "training"
    amp = lookup(precision, lambda p: float(str(p).startswith("amp_"))) > 0
    params = np.asarray(cols["param_count_m"], dtype=float) * 1e6
    acts = np.asarray(cols["activations_m"], dtype=float) * 1e6 * np.asarray(cols["batch_size"], dtype=float)
    state = params * (bpe + OPTIMIZER_STATE_BYTES + np.where(amp, MASTER_WEIGHT_BYTES, 0.0))
    live = np.where(training, 1.0, INFERENCE_LIVE_FRACTION)
    return (params * bpe + np.where(training, state, 0.0) + acts * bpe * live) / GIB
