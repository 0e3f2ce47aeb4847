"""What the zoo stages compute: one target per measured (CNN, input size), its PTX archs and compiled batches.

Why one place: the `ptx` stage (src/zoo/table.py), `warm` (src/zoo/warm.py) and the `layers` stage
(src/zoo/layers_stage.py) pick the same definition for a model_key and take targets in the same order, so a time
budget spent by any of them covers the same CNNs first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from src.zoo.names import ModelSpec, spec_for_measured

# Definition precedence when several measured sources share one model_key (the join key holds one row).
SOURCE_PRIORITY = {"torchvision": 0, "timm": 1, "dlinfbench": 2, "tf_cnn_benchmarks": 3}


@dataclass
class Target:
    """One model to build: its measured identity, the definition to use and how widely it was measured."""

    model_key: str
    model: str
    model_source: str
    img_size: int
    n_gpus: int
    spec: ModelSpec | None
    gmacs: float = math.nan

    @property
    def slug(self) -> str:
        assert self.spec is not None
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.spec.name)
        return f"{self.spec.source}__{name}__{self.img_size}"


def cc_to_arch(cc: float) -> str:
    """Compute capability 8.6 -> 'sm_86' (12.0 -> 'sm_120')."""
    major = int(cc)
    minor = int(round((cc - major) * 10))
    return f"sm_{major}{minor}"


def select_targets(meas: pd.DataFrame, gpus: pd.DataFrame, sources: list[str] | None = None,
                   limit: int | None = None) -> tuple[list[Target], pd.DataFrame]:
    """Measured GPU rows of CNNs -> targets (model_key, img_size), most GPUs first; plus the rows' keys."""
    df = meas.loc[~meas["is_cpu"].astype(bool)]
    if "is_cnn" in df.columns:
        df = df.loc[df["is_cnn"].astype(bool)]
    if sources:
        df = df.loc[df["model_source"].isin(sources)]
    df = df.merge(gpus[["gpu", "compute_capability"]], on="gpu", how="left")
    df = df.loc[df["compute_capability"].notna()]
    # One definition per model_key: the highest-priority measured source.
    df = df.assign(_prio=df["model_source"].map(SOURCE_PRIORITY).fillna(9))
    best = df.sort_values("_prio").groupby("model_key", sort=False).first()[["model", "model_source"]]
    n_gpus = df.groupby("model_key")["gpu"].nunique()
    n_rows = df.groupby(["model_key", "img_size"]).size()
    gmacs = df.groupby("model_key")["gmacs"].median() if "gmacs" in df.columns else pd.Series(dtype=float)
    primary = n_rows.reset_index().sort_values(0, ascending=False).drop_duplicates("model_key")
    primary_keys = set(zip(primary["model_key"], primary["img_size"], strict=True))
    targets = []
    for (key, size), _grp in df.groupby(["model_key", "img_size"], sort=False):
        model, source = best.loc[key, "model"], best.loc[key, "model_source"]
        spec = spec_for_measured(str(model), str(key), str(source), int(size))
        targets.append(Target(str(key), str(model), str(source), int(size), int(n_gpus[key]), spec,
                              float(gmacs.get(key, math.nan))))
    # Each model's most-measured input size first (widest coverage of distinct CNNs), then other sizes;
    # within each pass the benchmark suites' nets first, then timm by number of GPUs measured on, cheapest
    # (fewest GMACs, timm's own figure) first so that a time budget covers as many CNNs as possible.
    order = {"torchvision": 0, "dlinfbench": 0, "tf_cnn_benchmarks": 0, "timm": 1}
    targets.sort(key=lambda t: ((t.model_key, t.img_size) not in primary_keys, order.get(t.model_source, 3),
                                -t.n_gpus, t.gmacs if t.gmacs == t.gmacs else 1e9, t.model_key, t.img_size))
    if limit is not None:
        targets = targets[:limit]
    keys = df[["model_key", "img_size", "batch_size", "compute_capability"]].drop_duplicates()
    return targets, keys


def compiled_batch_for(measured: int, compiled: list[int]) -> int:
    """The compiled batch whose counts stand for a measured batch: the largest compiled one not above it (per-sample
    counts fall as tiles fill with batch and level off, docs/zoo.md), else the smallest."""
    below = [c for c in compiled if c <= measured]
    return max(below) if below else min(compiled)


def batches_needed(target: Target, keys: pd.DataFrame, buckets: list[int]) -> list[int]:
    """The extra compiled batch sizes (of `buckets`) that some measured batch of this target would use."""
    mine = keys.loc[(keys["model_key"] == target.model_key) & (keys["img_size"] == target.img_size), "batch_size"]
    compiled = sorted({1, *buckets})
    return sorted({compiled_batch_for(int(b), compiled) for b in mine.unique()} - {1})
