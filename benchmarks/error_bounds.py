"""What limits the grouped protocols: the held-out error left if a model knew each group's own offset.

Why: issue 12 asks to say plainly what keeps leave_family_out and leave_gpu_out above their 12 % targets (data,
features or model). From the train stage's held-out predictions (reports/train/<model>/<protocol>/predictions.csv,
joined to data/processed/dataset.parquet on measurement_id) this prints, per protocol, the pooled MAPE as predicted
and after an oracle removes the median log error of every group at one level (the CNN family, the CNN, the CNN on
one GPU in one setting, ...). The oracle reads the held-out rows themselves, so these are bounds, never a model:
"if the learner got each family's offset exactly right, the MAPE would still be X". What stays after the finest
level is spread inside one configuration's rows (framework releases, repeats), i.e. measurement noise.

Also per runtime and per source (the issue-20 question: what limits TensorRT held out), and each source's twin
noise floor: the MAPE of predicting every row by the median of its twins (same configuration, other release or
repeat: src.train.protocols.CONFIG_COLUMNS), over configurations with at least two rows.

And per (source, memory layout, operator class, framework release) (`_by_layout.csv`): timm's channels-last rows
carry about twice the error of its NCHW rows under every protocol, and the operator classes of `operator_classes`
(GroupNorm, grouped and depthwise convolutions, whose NHWC kernels changed between cuDNN releases) say where.

Writes reports/bench/error_bounds.json (+ _levels.csv, _by_source.csv, _by_layout.csv, .png) and logs an MLflow run
`benchmark/error_bounds` (experiment cnnperf-bench).

    python benchmarks/error_bounds.py [--model xgb] [--no-mlflow]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_pair_scaling import save_with_legend  # noqa: E402
from pipeline_predictions import held_out_predictions  # noqa: E402

from src.config import REPO_ROOT, compose  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402
from src.train.protocols import CONFIG_COLUMNS  # noqa: E402

PROTOCOLS = ("random", "leave_model_out", "leave_gpu_out", "leave_family_out", "leave_arch_out", "leave_runtime_out")
SETTING = ["source", "precision", "mode", "compile_mode", "batch_size", "img_size", "memory_layout"]
# Oracle levels, coarse to fine: the groups whose median log error is removed.
LEVELS = {
    "family": ["family"],
    "gpu": ["gpu"],
    "gpu_setting": ["gpu", "source", "precision", "mode", "compile_mode"],
    "cnn": ["model_key"],
    "cnn_gpu": ["model_key", "gpu"],
    "cnn_gpu_setting": ["model_key", "gpu", *SETTING],
}
DATASET_COLUMNS = sorted({"measurement_id", "family", "framework_version", *CONFIG_COLUMNS, *SETTING})


def mape(measured: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted / measured - 1.0)) * 100) if len(measured) else float("nan")


def with_config(pred: pd.DataFrame, dataset: pd.DataFrame) -> pd.DataFrame:
    """Held-out predictions with the dataset's configuration columns (rows missing from the dataset are an
    error: the predictions and the dataset must come from one pipeline run)."""
    extra = [c for c in DATASET_COLUMNS if c in dataset.columns and (c not in pred.columns or c == "measurement_id")]
    out = pred.merge(dataset[extra], on="measurement_id", how="left", validate="many_to_one")
    if out["source"].isna().any():
        missing = out.loc[out["source"].isna(), "measurement_id"].iloc[0]
        raise ValueError(f"prediction row {missing!r} is not in the dataset: rerun `dvc repro` so both match")
    return out


def oracle_mape(frame: pd.DataFrame, keys: list[str]) -> float:
    """MAPE after removing each group's median log error (the group's own held-out rows set it)."""
    log_err = np.log(frame["predicted"].to_numpy(float) / frame["measured"].to_numpy(float))
    offset = pd.Series(log_err, index=frame.index).groupby([frame[k] for k in keys], dropna=False).transform(
        "median").to_numpy()
    return float(np.mean(np.abs(np.exp(log_err - offset) - 1.0)) * 100)


def twin_floor(dataset: pd.DataFrame, target: str = "target") -> pd.DataFrame:
    """Per source: rows in configurations with twins, and the MAPE of predicting each by its twins' median."""
    keys = [c for c in CONFIG_COLUMNS if c in dataset.columns]
    grouped = dataset.groupby(keys, dropna=False)[target]
    size = grouped.transform("size")
    twins = dataset.loc[size >= 2].assign(median=grouped.transform("median")[size >= 2])
    ape = np.abs(twins[target] / twins["median"] - 1.0) * 100
    return (twins.assign(ape=ape).groupby("source")["ape"].agg(twin_rows="size", twin_floor_mape="mean")
            .reset_index())


def levels_table(pred: pd.DataFrame) -> dict[str, float]:
    out = {"as_predicted": mape(pred["measured"].to_numpy(float), pred["predicted"].to_numpy(float))}
    out.update({name: oracle_mape(pred, keys) for name, keys in LEVELS.items()})
    return out


def setting_dimensions(pred: pd.DataFrame) -> dict[str, float]:
    """The per-(CNN, GPU) bound refined by one setting column at a time: which dimension of the setting holds the
    error a per-(CNN, GPU) offset leaves (the larger the drop, the more of it lies along that column)."""
    base = LEVELS["cnn_gpu"]
    return {column: oracle_mape(pred, [*base, column]) for column in SETTING}


def by_source(protocol: str, pred: pd.DataFrame) -> pd.DataFrame:
    ape = np.abs(pred["predicted"] / pred["measured"] - 1.0) * 100
    ratio = pred["predicted"] / pred["measured"]
    return (pred.assign(ape=ape, ratio=ratio).groupby(["runtime", "source"])
            .agg(rows=("ape", "size"), mape=("ape", "mean"), median_predicted_over_measured=("ratio", "median"))
            .reset_index().assign(protocol=protocol))


def operator_classes(layers: pd.DataFrame) -> pd.Series:
    """Per model_key, the operators whose channels-last (NHWC) kernels changed most between the cuDNN / PyTorch
    releases of the data: `group_norm` (any GroupNorm), else `grouped_conv` (>= 5 % of the forward MACs in
    grouped, not depthwise, convolutions), else `depthwise` (>= 1 %), else `dense`. From the layer table's forward
    pass (columns model_key, pass, op, kind, macs_per_sample)."""
    fwd = layers.loc[layers["pass"].astype(str) == "forward"]
    kind = fwd["kind"].astype(str)
    macs = fwd["macs_per_sample"].astype(float)
    per = pd.DataFrame({"model_key": fwd["model_key"].astype(str), "macs": macs,
                        "grouped": macs.where(kind == "grouped_conv", 0.0),
                        "depthwise": macs.where(kind == "depthwise_conv", 0.0),
                        "gn": fwd["op"].astype(str).str.startswith("native_group_norm").astype(float)})
    g = per.groupby("model_key").sum()
    share = g[["grouped", "depthwise"]].div(g["macs"].where(g["macs"] > 0), axis=0).fillna(0.0)
    out = np.select([g["gn"] > 0, share["grouped"] >= 0.05, share["depthwise"] >= 0.01],
                    ["group_norm", "grouped_conv", "depthwise"], "dense")
    return pd.Series(out, index=g.index, name="operator_class")


def by_layout(protocol: str, pred: pd.DataFrame, classes: pd.Series) -> pd.DataFrame:
    """Held-out error per (source, memory layout, operator class, framework release): where the NHWC rows' extra
    error lies."""
    ape = np.abs(pred["predicted"] / pred["measured"] - 1.0) * 100
    log_err = np.log(pred["predicted"] / pred["measured"])
    cls = pred["model_key"].astype(str).map(classes).fillna("no_layers")
    return (pred.assign(ape=ape, log_err=log_err, operator_class=cls)
            .groupby(["source", "memory_layout", "operator_class", "framework_version"], dropna=False)
            .agg(rows=("ape", "size"), mape=("ape", "mean"), median_log_error=("log_err", "median"),
                 log_error_sd=("log_err", "std"))
            .reset_index().assign(protocol=protocol))


def plot(levels: pd.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    cols = ["as_predicted", *LEVELS]
    x = np.arange(len(levels))
    width = 0.8 / len(cols)
    for i, col in enumerate(cols):
        ax.bar(x + i * width, levels[col], width, label=col.replace("_", " "))
    ax.set_xticks(x + 0.4 - width / 2, levels["protocol"], rotation=20)
    ax.set_ylabel("pooled held-out MAPE %")
    ax.set_title("Error left after an oracle removes each group's median offset (bounds, not a model)")
    return save_with_legend(fig, ax, path, dpi=120, legend_size=8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="xgb")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "error_bounds.json"))
    args = ap.parse_args()
    dataset = pd.read_parquet(REPO_ROOT / "data" / "processed" / "dataset.parquet",
                              columns=[*DATASET_COLUMNS, "target"])
    classes = operator_classes(pd.read_parquet(REPO_ROOT / "data" / "processed" / "layers.parquet",
                                               columns=["model_key", "pass", "op", "kind", "macs_per_sample"]))
    rows, sources, dims, layouts = [], [], [], []
    for protocol, _, pred in held_out_predictions(PROTOCOLS, [args.model]):
        pred = with_config(pred, dataset)
        rows.append({"protocol": protocol, "rows": len(pred), **levels_table(pred)})
        dims.append({"protocol": protocol, "cnn_gpu": rows[-1]["cnn_gpu"], **setting_dimensions(pred)})
        sources.append(by_source(protocol, pred))
        layouts.append(by_layout(protocol, pred, classes))
    if not rows:
        raise SystemExit(f"no held-out predictions of {args.model} under reports/train: run `dvc repro` first")
    levels = pd.DataFrame(rows)
    per_source = pd.concat(sources, ignore_index=True)
    per_layout = pd.concat(layouts, ignore_index=True)
    floor = twin_floor(dataset)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    levels.to_csv(out_path.with_name(out_path.stem + "_levels.csv"), index=False)
    per_source.to_csv(out_path.with_name(out_path.stem + "_by_source.csv"), index=False)
    per_layout.to_csv(out_path.with_name(out_path.stem + "_by_layout.csv"), index=False)
    png = plot(levels, out_path.with_suffix(".png"))
    print(levels.round(2).to_string(index=False))
    print("per (CNN, GPU) and one setting column:")
    print(pd.DataFrame(dims).round(2).to_string(index=False))
    print(per_source.loc[per_source["protocol"].isin(["leave_model_out", "leave_runtime_out"])
                         & (per_source["runtime"] != "eager")].round(2).to_string(index=False))
    print(floor.round(2).to_string(index=False))
    timm = per_layout.loc[per_layout["source"] == "timm"]
    pooled = (timm.assign(err=timm["mape"] * timm["rows"])
              .groupby(["protocol", "memory_layout", "operator_class"])[["rows", "err"]].sum())
    print("timm rows by layout and operator class (MAPE %):")
    print((pooled["err"] / pooled["rows"]).unstack(["memory_layout", "operator_class"]).round(1).to_string())
    metrics = {f"{r['protocol']}_{k}": float(r[k]) for r in rows for k in ("as_predicted", *LEVELS)}
    c = OmegaConf.to_container(compose([]), resolve=True)
    record_benchmark({"model": args.model, "levels": rows, "cnn_gpu_and_one_setting_column": dims,
                      "by_source": per_source.to_dict(orient="records"),
                      "twin_floor": floor.to_dict(orient="records"),
                      "level_keys": LEVELS}, out_path, None if args.no_mlflow else c["mlflow"],
                     "benchmark/error_bounds", {"model": args.model}, metrics,
                     artifacts=[png, out_path.with_name(out_path.stem + "_levels.csv"),
                                out_path.with_name(out_path.stem + "_by_source.csv"),
                                out_path.with_name(out_path.stem + "_by_layout.csv")])
    print(f"-> {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
