"""The per-kernel PTX table (`ptx_kernels.parquet`) and the network counts derived from it.

One row per kernel launch site of one inference of a (CNN, input size) at the compiled batch size, per PTX arch:
the TVM kernel, its content digest (src/zoo/kernel_cache.py), the graph operators it implements, grid and
block, how often one inference calls it, and the executed counts of ONE call (thread and warp instructions,
instructions by class, bytes by state space). The network counts of `ptx_counts.parquet` are these rows times
`calls`, summed (`network_from_kernels`), so the two tables cannot disagree.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

KEY = ["model_key", "img_size", "batch_size", "nvcc_arch"]
SUMMED = ("thread_instructions", "warp_instructions", "predicated_off")
META = ("zoo_source", "zoo_model", "zoo_seconds", "zoo_version")
DESCRIBE = ("order", "kernel", "kernel_digest", "operators", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
            "block_z", "calls", "estimate", "block_fraction")


def column(name: str) -> str:
    """A class or state-space name as a column suffix (`load.global` -> `load_global`)."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def kernel_frame(model_key: str, img_size: int, result: dict[str, Any]) -> pd.DataFrame:
    """Rows of one model's result (`per_kernel` of each distinct PTX arch it was compiled for)."""
    rows = []
    seen: set[str] = set()
    for c in result["by_arch"].values():
        pa = c["ptx_arch"]
        if pa in seen:
            continue
        seen.add(pa)
        if "per_kernel" not in c:
            raise KeyError(f"{result['model']}: result for {pa} has no per-kernel counts (cache of an older zoo "
                           "version?)")
        for x in c["per_kernel"]:
            row = {"model_key": model_key, "img_size": int(img_size), "batch_size": int(result["batch_size"]),
                   "nvcc_arch": pa, "order": int(x["order"]), "kernel": x["kernel"],
                   "kernel_digest": x["kernel_digest"], "operators": x["operators"],
                   "grid_x": x["grid"][0], "grid_y": x["grid"][1], "grid_z": x["grid"][2],
                   "block_x": x["block"][0], "block_y": x["block"][1], "block_z": x["block"][2],
                   "calls": int(x["calls"]), "estimate": bool(x["estimate"]),
                   "block_fraction": float(x.get("block_fraction", 1.0)),
                   "zoo_source": result["source"], "zoo_model": result["model"],
                   "zoo_seconds": float(result["seconds"]), "zoo_version": str(result["zoo_version"])}
            row.update({k: int(x[k]) for k in SUMMED})
            row.update({f"class_{column(k)}": int(v) for k, v in x["by_class"].items()})
            row.update({f"bytes_{column(k)}": int(v) for k, v in x["bytes_by_space"].items()})
            rows.append(row)
    return pd.DataFrame(rows)


def finish(kernels: pd.DataFrame) -> pd.DataFrame:
    """Counts absent for a kernel are zero (it executes none of that class); integer counts stay integers."""
    if kernels.empty:
        return kernels
    counted = [c for c in kernels.columns if c.startswith(("class_", "bytes_")) or c in SUMMED]
    kernels[counted] = kernels[counted].fillna(0).astype("int64")
    # rows counted before block sampling existed were counted on every block
    kernels["block_fraction"] = (kernels["block_fraction"] if "block_fraction" in kernels else pd.Series(
        1.0, index=kernels.index)).fillna(1.0).astype("float64")
    # One column order whatever order rows were computed or carried in: the same rows write the same bytes.
    cols = [*KEY, *DESCRIBE, *SUMMED, *sorted(c for c in counted if c.startswith("class_")),
            *sorted(c for c in counted if c.startswith("bytes_")), *META]
    return kernels[cols].sort_values([*KEY, "order"], kind="mergesort").reset_index(drop=True)


def network_from_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per (model_key, img_size, compiled batch, nvcc arch): per-call counts x calls, summed; kernels =
    distinct kernels, launches = calls of one inference, estimate = any launch estimated."""
    counted = [c for c in kernels.columns if c.startswith(("class_", "bytes_")) or c in SUMMED]
    calls = kernels["calls"].to_numpy(dtype=np.int64)[:, None]
    weighted = pd.DataFrame(kernels[counted].to_numpy(dtype=np.int64) * calls, columns=counted, index=kernels.index)
    g = pd.concat([kernels[KEY], weighted], axis=1).groupby(KEY, sort=True)
    net = g[counted].sum()
    per = kernels.groupby(KEY, sort=True)
    net["kernels"] = per["kernel"].nunique()
    net["launches"] = per["calls"].sum()
    net["estimate"] = per["estimate"].any()
    for m in META:
        net[m] = per[m].first()
    return net.reset_index()


def as_results(net: pd.DataFrame) -> dict[tuple[str, int], dict[int, dict[str, Any]]]:
    """Network rows in the shape of stage results ({"by_arch": {nvcc arch: totals}}), keyed by (CNN, size) and
    then by compiled batch size."""
    classes = [c for c in net.columns if c.startswith("class_")]
    spaces = [c for c in net.columns if c.startswith("bytes_")]
    out: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for r in net.to_dict("records"):
        by_batch = out.setdefault((r["model_key"], int(r["img_size"])), {})
        res = by_batch.setdefault(int(r["batch_size"]), {
            "source": r["zoo_source"], "model": r["zoo_model"], "batch_size": int(r["batch_size"]),
            "seconds": float(r["zoo_seconds"]), "zoo_version": r["zoo_version"], "by_arch": {}})
        res["by_arch"][r["nvcc_arch"]] = {
            **{k: int(r[k]) for k in SUMMED}, "kernels": int(r["kernels"]), "launches": int(r["launches"]),
            "estimate": bool(r["estimate"]), "ptx_arch": r["nvcc_arch"],
            "by_class": {c.removeprefix("class_"): int(r[c]) for c in classes},
            "bytes_by_space": {c.removeprefix("bytes_"): int(r[c]) for c in spaces}}
    return out


def dedup_summary(kernels: pd.DataFrame) -> dict[str, Any]:
    """How much compiling per distinct kernel saves: distinct kernels vs kernel launch sites and launches."""
    if kernels.empty:
        return {"launch_sites": 0, "launches": 0, "distinct_kernels": 0}
    sites = len(kernels)
    distinct = int(kernels[["nvcc_arch", "kernel_digest"]].drop_duplicates().shape[0])
    geometries = int(kernels[["nvcc_arch", "kernel_digest", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                              "block_z"]].drop_duplicates().shape[0])
    per_model = kernels.groupby(["model_key", "img_size", "batch_size", "nvcc_arch"])["kernel_digest"].nunique().sum()
    return {"launch_sites": sites, "launches": int(kernels["calls"].sum()), "distinct_kernels": distinct,
            "distinct_kernel_launches": geometries, "kernels_summed_per_model": int(per_model),
            "distinct_over_per_model": distinct / per_model if per_model else float("nan"),
            "distinct_over_launches": distinct / int(kernels["calls"].sum())}


RULE_METRICS = {"thread": "thread_instructions", "warp": "warp_instructions", "fma": "class_fma",
                "load_global_bytes": "bytes_load_global"}


def linear_rule_errors(kernels: pd.DataFrame, batch: int) -> pd.DataFrame:
    """One row per (model_key, img_size, nvcc_arch) compiled at batch 1 and at `batch`: the error the batch-1 rule
    makes there, batch * count(1) / count(batch) - 1 (positive = it over-estimates), per metric."""
    net = network_from_kernels(kernels)
    key = ["model_key", "img_size", "nvcc_arch"]
    one = net.loc[net["batch_size"] == 1].set_index(key)
    big = net.loc[net["batch_size"] == batch].set_index(key)
    both = one.index.intersection(big.index)
    out = pd.DataFrame(index=both)
    for name, col in RULE_METRICS.items():
        b1 = one.loc[both, col].to_numpy(dtype=float)
        bb = big.loc[both, col].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[name] = np.where(bb > 0, batch * b1 / bb - 1.0, np.nan)
    out["launches_ratio"] = big.loc[both, "launches"].to_numpy() / one.loc[both, "launches"].to_numpy()
    return out.reset_index()


# Executed FMAs per multiply-accumulate of the CNN above which a compiled result is not a count of the network but
# of a schedule that recomputes it. Measured on the committed table (2026-11-26, 3,179 results, sm_75): a median
# 1.17 FMA per MAC at batch 1, 1.09 at 32, the largest 3.8 (ghostnet_050's cheap operators); dm_nfnet at batch 1,
# where TVM fused each squeeze-excite 1x1 convolution into the broadcast multiply of the full feature map and
# dlight's fallback schedule recomputed it per output element, 47-246.
MAX_FMA_PER_MAC = 10.0


def implausible_results(kernels: pd.DataFrame, macs: pd.DataFrame,
                        limit: float = MAX_FMA_PER_MAC) -> pd.DataFrame:
    """(model_key, img_size, batch_size) whose executed FMAs exceed `limit` x the CNN's MACs (any PTX arch).

    `macs` holds `model_key`, `img_size` and `macs` (per sample, at that input size, from the static analyzer).
    Returns those keys with `fma_per_mac` and the kernel doing most of the FMAs (`worst_kernel`), so that the
    failure names where the recomputation is. Results without MACs are not judged.
    """
    cols = ["model_key", "img_size", "batch_size", "fma_per_mac", "worst_kernel"]
    if kernels.empty or "class_fma" not in kernels.columns:
        return pd.DataFrame(columns=cols)
    k = kernels.assign(_fma=kernels["class_fma"].to_numpy(dtype=float) * kernels["calls"].to_numpy(dtype=float))
    keys = ["model_key", "img_size", "batch_size", "nvcc_arch"]
    per = k.groupby(keys, sort=False)["_fma"].sum().reset_index()
    per = per.merge(macs[["model_key", "img_size", "macs"]], on=["model_key", "img_size"], how="inner")
    per = per.loc[per["macs"] > 0]
    per["fma_per_mac"] = per["_fma"] / (per["macs"] * per["batch_size"])
    bad = per.loc[per["fma_per_mac"] > limit]
    if bad.empty:
        return pd.DataFrame(columns=cols)
    bad = bad.sort_values("fma_per_mac", ascending=False).drop_duplicates(["model_key", "img_size", "batch_size"])
    top = k.sort_values("_fma", ascending=False).drop_duplicates(keys)[keys + ["kernel"]]
    bad = bad.merge(top, on=keys, how="left").rename(columns={"kernel": "worst_kernel"})
    return bad[cols].reset_index(drop=True)
