"""The measurement noise floor: how much repeated measurements of one configuration disagree.

No predictor can be more accurate than the data's own repeatability, so later stages compare against it.
Two estimates (the headline `noise_floor_mape_pct` is the first one restricted to PyTorch 2.x pairs, since
older-version pairs also measure real software speed-ups, not only noise):
- `timm_cross_version`: the same GPU, model and configuration (precision, layout, compile mode, image and
  batch size, mode) measured under different PyTorch versions; for every ordered pair (a, b) the absolute
  percentage error of predicting b by a, |a - b| / b. Its mean is the MAPE of a perfect "repeat" predictor.
- `ryujaehun_within_run`: the per-iteration spread of one run, inter-quartile range / median.
- `repeats_by_source`: for every source, rows of one configuration (GPU, framework, CNN, batch, image size,
  precision, mode, runtime, layout, MLPerf scenario) that the source reports more than once: other submissions or
  rounds (MLPerf), the two V100 tables of PaddleClas, repeated runs and cuDNN vs `nn` kernels (jcjohnson), other
  releases (timm); |a - b| / b over ordered pairs. Pairs may differ by software release or library variant, so this
  is an upper bound of pure noise.
- `indistinguishable_by_source`: for every source, groups of rows equal in every column a model sees of a run
  (`LEARNER_CONFIG`: `REPEAT_CONFIG` without the MLPerf scenario, with the release, GPU count and data mode) whose
  latencies still differ by more than `CONFLICT_FACTOR`. A model can only average such rows, so many of them mean
  the table hides a setting that sets the speed: jcjohnson's cuDNN and `nn` backends were such a case (242 of its
  274 rows in groups a median 2.8x apart) until the backend became the release. What remains (2026-11-27): our own
  H200's eager batch-1 repeats (156 rows; the host differs between sessions, docs/profiling.md), PaddleClas's V100
  tables that disagree (76), Lambda's multi-GPU runs (24), ryujaehun's reruns (22) and MLPerf submissions (13).
- `layer_cross_source` (single-layer table): how far two sources (DeepBench vs NeuSight vs CDECatapult: different
  frameworks, cuDNN releases and timing loops) disagree on one GPU. Exact shape matches are counted (there are none
  in the current mirror: the sources sample different shapes), so the comparison is on similar layers: the same
  GPU, op and precision, FLOPs and arithmetic intensity in the same octave (factor-2 bin); per source the median
  achieved FLOP/s in the bin; |a - b| / b over ordered source pairs. The floor of a layer model that pools sources.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

import numpy as np
import pandas as pd

CONFIG = ["gpu", "model", "mode", "precision", "memory_layout", "compile_mode", "img_size", "batch_size"]
LAYER_SHAPE = ["gpu", "op", "precision", "n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "pad_h", "pad_w",
               "dilation_h", "dilation_w", "groups"]


def _stats(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"n": 0}
    return {
        "n": int(len(values)),
        "mean_pct": float(np.mean(values) * 100),
        "median_pct": float(np.median(values) * 100),
        "p90_pct": float(np.quantile(values, 0.9) * 100),
    }


def cross_version_errors(frame: pd.DataFrame) -> pd.DataFrame:
    """Ordered pairs of timm repeats of one configuration under two PyTorch versions, with |a-b|/b."""
    timm = frame[(frame["source"] == "timm") & ~frame["is_cpu"]]
    pairs: list[dict[str, Any]] = []
    for key, group in timm.groupby(CONFIG, sort=False):
        if group["framework_version"].nunique() < 2:
            continue
        by_version = group.groupby("framework_version")["latency_ms"].median()
        for (va, a), (vb, b) in permutations(by_version.items(), 2):
            pairs.append({"gpu": key[0], "version_a": va, "version_b": vb, "ape": abs(a - b) / b})
    return pd.DataFrame(pairs, columns=["gpu", "version_a", "version_b", "ape"])


REPEAT_CONFIG = ["gpu", "framework", "model_key", "batch_size", "img_size", "precision", "mode", "compile_mode",
                 "memory_layout", "scenario"]


def repeats_by_source(frame: pd.DataFrame) -> dict[str, Any]:
    """Per source: |a-b|/b over ordered pairs of rows sharing one configuration (see the module docstring)."""
    gpu_rows = frame[~frame["is_cpu"]]
    out: dict[str, Any] = {}
    for source, rows in gpu_rows.groupby("source", sort=True):
        keys = [c for c in REPEAT_CONFIG if c in rows.columns]
        shared = rows[rows.groupby(keys, dropna=False)["latency_ms"].transform("size") > 1]
        if shared.empty:
            out[source] = {"n": 0}
            continue
        pairs = shared[keys + ["latency_ms"]].reset_index().merge(shared[keys + ["latency_ms"]].reset_index(),
                                                                  on=keys, suffixes=("_a", "_b"))
        pairs = pairs[pairs["index_a"] != pairs["index_b"]]
        ape = (pairs["latency_ms_a"] - pairs["latency_ms_b"]).abs() / pairs["latency_ms_b"]
        out[source] = {**_stats(ape.to_numpy()), "configurations": int(shared.groupby(keys, dropna=False).ngroups)}
    return out


# What a model sees of a run: rows equal in all of these are indistinguishable to it (the learner's inputs beyond
# the GPU specs and the CNN's static numbers, which these determine). The GPU count and data mode are not inputs,
# but the training table keeps one value of each (conf/data), so rows that differ in them never meet there.
LEARNER_CONFIG = ["gpu", "framework", "framework_version", "model_key", "batch_size", "img_size", "precision", "mode",
                  "compile_mode", "memory_layout", "num_gpus", "data_mode"]
# Latencies of one such group further apart than this (max / min) are counted as a conflict, not as noise: the
# timm cross-version p90 (a release change, not noise) is 28 %.
CONFLICT_FACTOR = 1.5


def indistinguishable_by_source(frame: pd.DataFrame, factor: float = CONFLICT_FACTOR) -> dict[str, Any]:
    """Per source: groups of rows a model cannot tell apart (`LEARNER_CONFIG`), and those among them whose
    latencies differ by more than `factor` (max / min), with their rows and the median ratio of those groups."""
    gpu_rows = frame[~frame["is_cpu"]]
    out: dict[str, Any] = {}
    for source, rows in gpu_rows.groupby("source", sort=True):
        keys = [c for c in LEARNER_CONFIG if c in rows.columns]
        lat = rows.groupby(keys, dropna=False)["latency_ms"]
        size, ratio = lat.transform("size"), lat.transform("max") / lat.transform("min")
        shared, conflict = size > 1, (size > 1) & (ratio > factor)
        groups = rows[shared].groupby(keys, dropna=False)["latency_ms"]
        ratios = (groups.max() / groups.min()).to_numpy()
        out[source] = {"rows": int(len(rows)), "shared_rows": int(shared.sum()), "groups": int(len(ratios)),
                       "conflict_groups": int((ratios > factor).sum()), "conflict_rows": int(conflict.sum()),
                       "conflict_share": float(conflict.sum() / len(rows)) if len(rows) else 0.0,
                       "conflict_median_ratio": float(np.median(ratios[ratios > factor])) if (ratios > factor).any()
                       else None}
    return out


def noise_floor(frame: pd.DataFrame) -> dict[str, Any]:
    """Noise-floor metrics (percent) for the DVC metrics file."""
    pairs = cross_version_errors(frame)
    per_gpu = {gpu: _stats(group["ape"].to_numpy()) for gpu, group in pairs.groupby("gpu")}
    label = pairs["gpu"] + " pt" + pairs[["version_a", "version_b"]].min(axis=1) + " vs pt" + pairs[
        ["version_a", "version_b"]].max(axis=1)
    per_pair = {name: _stats(group["ape"].to_numpy()) for name, group in pairs.groupby(label)}
    modern = pairs[pairs["version_a"].str.startswith("2.") & pairs["version_b"].str.startswith("2.")]
    ryu = frame[(frame["source"] == "ryujaehun") & frame["latency_spread_ms"].notna()]
    spread = (ryu["latency_spread_ms"] / ryu["latency_ms"]).to_numpy()
    return {
        "noise_floor_mape_pct": _stats(modern["ape"].to_numpy()).get("mean_pct"),
        "timm_cross_version": {**_stats(pairs["ape"].to_numpy()), "per_gpu": per_gpu, "per_version_pair": per_pair},
        "timm_cross_version_pytorch2": _stats(modern["ape"].to_numpy()),
        "ryujaehun_within_run_iqr_over_median": _stats(spread),
        "repeats_by_source": repeats_by_source(frame),
        "indistinguishable_by_source": indistinguishable_by_source(frame),
        "definition": "timm: |a-b|/b over ordered pairs of PyTorch versions, same GPU/model/config; "
        "ryujaehun: IQR/median of per-iteration samples after warm-up",
    }


def _source_pairs(medians: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Ordered pairs of different sources sharing `keys`, with |a-b|/b of their `value`."""
    shared = medians[medians.groupby(keys, sort=False)["source"].transform("nunique") > 1]
    pairs = shared.merge(shared, on=keys, suffixes=("_a", "_b"))
    pairs = pairs[pairs["source_a"] != pairs["source_b"]]
    ape = (pairs[f"{value}_a"] - pairs[f"{value}_b"]).abs() / pairs[f"{value}_b"]
    return pd.DataFrame({"gpu": pairs["gpu"], "source_a": pairs["source_a"], "source_b": pairs["source_b"],
                         "ape": ape}).reset_index(drop=True)


def layer_cross_source_errors(layers: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(exact-shape pairs on latency, similar-layer pairs on achieved FLOP/s), both as gpu/source_a/source_b/ape."""
    exact = layers.groupby(LAYER_SHAPE + ["source"], sort=False)["latency_ms"].median().reset_index()
    binned = layers.assign(
        flops_octave=np.floor(np.log2(layers["flops"].astype(float))),
        intensity_octave=np.floor(np.log2(layers["flops"].astype(float) / layers["bytes_total"].astype(float))),
        achieved=layers["flops"].astype(float) / layers["latency_ms"].astype(float),
    )
    bins = ["gpu", "op", "precision", "flops_octave", "intensity_octave"]
    similar = binned.groupby(bins + ["source"], sort=False)["achieved"].median().reset_index()
    return _source_pairs(exact, LAYER_SHAPE, "latency_ms"), _source_pairs(similar, bins, "achieved")


def layer_noise_floor(layers: pd.DataFrame) -> dict[str, Any]:
    """Agreement between layer sources, overall, per GPU and per source pair (see the module docstring)."""
    exact, similar = layer_cross_source_errors(layers)
    label = similar["source_a"] + " vs " + similar["source_b"]
    return {
        "exact_shapes_shared": int(len(exact) // 2),
        "exact_shape": _stats(exact["ape"].to_numpy()),
        "similar_layers": {
            **_stats(similar["ape"].to_numpy()),
            "per_gpu": {gpu: _stats(g["ape"].to_numpy()) for gpu, g in similar.groupby("gpu")},
            "per_source_pair": {name: _stats(g["ape"].to_numpy()) for name, g in similar.groupby(label)},
        },
        "definition": "exact: same GPU, op, precision and conv shape, |a-b|/b of the sources' median latencies; "
        "similar: same GPU, op, precision, FLOPs and intensity octave, |a-b|/b of median achieved FLOP/s",
    }
