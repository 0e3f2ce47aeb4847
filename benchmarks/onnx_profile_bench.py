"""What a user who brings an ONNX file gets: its per-layer table against the zoo's, and held-out accuracy from it.

A CNN nobody measured reaches `python -m src.predict` as a zoo name, an ONNX file or its whole-network numbers.
Since src/predict/profiles.py, the first two are priced layer by layer from a kernel profile made at query time;
the numbers alone go to the by-numbers learner. This benchmark takes measured CNNs exported to ONNX
(`--onnx-dir`, a folder with `manifest.csv`: model_key, img_size, path; made in the zoo venv with
`torch.onnx.export`, random weights) and asks two questions:

1. Decomposition: per CNN, the ONNX per-layer table (src/zoo/onnx_layers.py) against the committed table of the
   same CNN (data/processed/layers.parquet, torch's dispatch on the meta device), forward pass at batch 1, fp32:
   MACs, FLOPs, bytes and kernels, and the seconds the ONNX table takes.
2. Accuracy: every held-out inference row of those CNNs under `--protocols` (default leave_model_out: the CNN's
   architecture is in no training row), predicted four ways by the same fitted model (the served configuration:
   warm start, by-numbers learner on): named (the committed profile and PTX counts, as a measured CNN), by a zoo
   name (the same torch profile made at query time, no PTX counts: a zoo CNN nobody measured), from its ONNX file
   (the ONNX profile, no PTX counts) and by its numbers (a CNN nobody measured). Same rows for the four.

Writes reports/bench/onnx_profile_bench.json (and an MLflow run unless --no-mlflow).

    python benchmarks/onnx_profile_bench.py --onnx-dir DIR [--model xgb] [--protocols leave_model_out]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.by_numbers_bench import UNKNOWN_CNN  # noqa: E402
from benchmarks.train_time_bench import pipeline_overrides  # noqa: E402

# named: the committed profile and PTX counts (a measured CNN); zoo_name: the same torch profile, no PTX counts (a
# zoo CNN nobody measured); onnx: the ONNX file's profile, no PTX counts; by_numbers: whole-network numbers only.
VARIANTS = ("named", "zoo_name", "onnx", "by_numbers")


def onnx_tables(manifest: pd.DataFrame, sizes: dict[str, set[int]], failures: list[dict]
                ) -> dict[tuple[str, int], pd.DataFrame]:
    """(model_key, img_size) -> the ONNX file's per-layer table at that size (`seconds` in attrs); a file that has
    none goes to `failures` with the reason."""
    from src.zoo.layers import layer_table

    out = {}
    for r in tqdm(list(manifest.itertuples()), desc="ONNX per-layer tables"):
        for size in sorted(sizes.get(r.model_key, set()) | {int(r.img_size)}):
            try:
                out[(r.model_key, size)] = layer_table("onnx", str(r.path), size)
            except (ValueError, RuntimeError) as exc:
                failures.append({"model_key": r.model_key, "img_size": size, "error": str(exc)[:300]})
    return out


def decomposition(tables: dict[tuple[str, int], pd.DataFrame], layers_path: Path) -> pd.DataFrame:
    """Per (CNN, size): ONNX over committed-table ratios of forward MACs, FLOPs and bytes at batch 1 (fp32), kernels."""
    from src.zoo.layer_pricing import sums

    keys = sorted({k for k, _ in tables})
    ref = pd.read_parquet(layers_path, filters=[("model_key", "in", keys), ("pass", "==", "forward")])
    rows = []
    for (key, size), onnx_df in tables.items():
        mine = ref.loc[(ref["model_key"].astype(str) == key) & (ref["img_size"] == size)]
        if mine.empty:
            continue
        t, o = sums(mine, 1)["forward"], sums(onnx_df, 1)["forward"]
        norm_kernels = int(((mine["kind"].astype(str) == "norm") & mine["launches_kernel"]).sum())
        rows.append({"model_key": key, "img_size": size, "macs_ratio": o["macs"] / t["macs"],
                     "flops_ratio": o["flops"] / t["flops"], "bytes_ratio": o["bytes"] / t["bytes"],
                     "kernels_torch": t["kernels"], "kernels_onnx": o["kernels"], "norm_kernels_torch": norm_kernels,
                     "onnx_table_seconds": float(onnx_df.attrs["seconds"])})
    return pd.DataFrame(rows)


def accuracy(model: str, protocols: list[str], manifest: pd.DataFrame, failures: list[dict]) -> tuple[dict, dict]:
    """Per protocol: MAPE % of the same held-out inference rows named, from the ONNX file and by their numbers;
    and the ONNX per-layer tables made for them."""
    from src.config import REPO_ROOT, compose
    from src.features.baseline import profile_indexes
    from src.features.kernels import LAYER_COLUMNS, kernel_profiles
    from src.train.protocols import outer_folds
    from src.train.run import Trainer

    c = OmegaConf.to_container(compose([*pipeline_overrides(), f"model={model}"]), resolve=True)
    trainer = Trainer(c)
    warm = dict(c["model"]["warm_start"])
    exported = set(manifest["model_key"])
    X_all = trainer.X
    target = (X_all["model_key"].astype(str).isin(exported) & (X_all["mode"].astype(str) == "inference")).to_numpy()
    sizes = {k: set(g["img_size"].astype(int)) for k, g in X_all.loc[target].groupby(
        X_all.loc[target, "model_key"].astype(str))}
    tables = onnx_tables(manifest, sizes, failures)
    target = target & np.array([(k, s) in tables for k, s in zip(X_all["model_key"].astype(str), X_all["img_size"],
                                                           strict=True)])
    profiles = kernel_profiles(pd.concat(
        [t.assign(model_key=f"onnx:{k}", img_size=s)[LAYER_COLUMNS] for (k, s), t in tables.items()],
        ignore_index=True), "ONNX per-layer tables")
    # what a zoo name of a CNN nobody measured gets: its torch per-layer table as a profile, no PTX counts
    zoo = pd.read_parquet(REPO_ROOT / "data" / "processed" / "layers.parquet", columns=LAYER_COLUMNS,
                          filters=[("model_key", "in", sorted({k for k, _ in tables}))])
    profiles = pd.concat([profiles, kernel_profiles(zoo.assign(model_key="zoo:" + zoo["model_key"].astype(str)),
                                                    "committed per-layer tables")], ignore_index=True)
    out = {}
    for protocol in protocols:
        folds, _ = outer_folds(trainer.df, protocol, c["split"], trainer.seed)
        parts = []
        for fold in tqdm(folds, desc=f"{model} {protocol}", leave=False):
            test = fold.test[target[fold.test]]
            if not len(test):
                continue
            fitted = trainer.make_model(warm).set_params(by_numbers_learner=True)
            fitted.fit(X_all.iloc[fold.train], trainer.y[fold.train])
            for index in profile_indexes(fitted):
                index.add(profiles)
            X, y = X_all.iloc[test], trainer.y[test]
            parts.append(pd.DataFrame({
                "model_key": X["model_key"].astype(str).to_numpy(), "measured": y,
                "named": fitted.predict(X),
                "zoo_name": fitted.predict(X.assign(model_key="zoo:" + X["model_key"].astype(str))),
                "onnx": fitted.predict(X.assign(model_key="onnx:" + X["model_key"].astype(str))),
                "by_numbers": fitted.predict(X.assign(model_key=UNKNOWN_CNN))}))
        res = pd.concat(parts, ignore_index=True)
        ape = {v: np.abs(res[v] / res["measured"] - 1) for v in VARIANTS}
        per_cnn = pd.DataFrame({v: a for v, a in ape.items()}).groupby(res["model_key"]).mean().mul(100)
        out[protocol] = {"rows": len(res), "cnns": int(res["model_key"].nunique()),
                         "per_cnn_median_mape": per_cnn.median().round(2).to_dict(),
                         "per_cnn_mean_mape": per_cnn.mean().round(2).to_dict(),
                         **{f"{v}_mape": float(100 * a.mean()) for v, a in ape.items()},
                         "per_cnn_mape": per_cnn.round(2).to_dict(orient="index")}
    return out, tables


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx-dir", required=True, help="folder with manifest.csv (model_key, img_size, path)")
    ap.add_argument("--model", default="xgb")
    ap.add_argument("--protocols", default="leave_model_out")
    ap.add_argument("--out", default="reports/bench/onnx_profile_bench.json")
    ap.add_argument("--no-mlflow", action="store_true")
    a = ap.parse_args()
    from src.config import REPO_ROOT
    from src.tracking import benchmark_store, record_benchmark

    mlflow_cfg = benchmark_store(a.no_mlflow)
    manifest = pd.read_csv(Path(a.onnx_dir) / "manifest.csv")
    manifest = manifest.loc[manifest["path"].notna() & manifest["error"].isna()] if "error" in manifest else manifest
    t0 = time.perf_counter()
    failures: list[dict] = []
    acc, tables = accuracy(a.model, a.protocols.split(","), manifest, failures)
    dec = decomposition(tables, REPO_ROOT / "data" / "processed" / "layers.parquet")
    kernels_gap = (dec["kernels_torch"] - dec["norm_kernels_torch"] - dec["kernels_onnx"]) / dec["kernels_torch"]
    summary = {"pairs": len(dec), "cnns": int(dec["model_key"].nunique()),
               "macs_ratio_median": float(dec["macs_ratio"].median()),
               "macs_ratio_min": float(dec["macs_ratio"].min()), "macs_ratio_max": float(dec["macs_ratio"].max()),
               "flops_ratio_median": float(dec["flops_ratio"].median()),
               "bytes_ratio_median": float(dec["bytes_ratio"].median()),
               "bytes_ratio_p10": float(dec["bytes_ratio"].quantile(0.1)),
               "bytes_ratio_p90": float(dec["bytes_ratio"].quantile(0.9)),
               "kernels_ratio_median": float((dec["kernels_onnx"] / dec["kernels_torch"]).median()),
               "kernels_beyond_folded_norm_median": float(kernels_gap.median()),
               "onnx_table_seconds_median": float(dec["onnx_table_seconds"].median()),
               "onnx_table_seconds_max": float(dec["onnx_table_seconds"].max())}
    print(dec.round(3).to_string(index=False))
    for f in failures:
        print(f"no ONNX table: {f['model_key']} {f['img_size']} px: {f['error']}")
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()})
    for protocol, r in acc.items():
        print(f"{a.model} {protocol} ({r['rows']} inference rows of {r['cnns']} CNNs): named {r['named_mape']:.2f} %, "
              f"zoo name (no PTX) {r['zoo_name_mape']:.2f} %, from the ONNX file {r['onnx_mape']:.2f} %, by its "
              f"numbers {r['by_numbers_mape']:.2f} %; per-CNN median {r['per_cnn_median_mape']}")
    out = {"model": a.model, "fit": "warm start, no tuning, by-numbers learner on (as served)",
           "overrides": pipeline_overrides(), "decomposition": summary,
           "decomposition_per_cnn": dec.round(4).to_dict(orient="records"), "onnx_failures": failures,
           "accuracy": acc,
           "seconds": time.perf_counter() - t0}
    metrics = {**{f"decomposition_{k}": v for k, v in summary.items() if isinstance(v, float)},
               **{f"{p}_{v}_mape": r[f"{v}_mape"] for p, r in acc.items() for v in VARIANTS}}
    record_benchmark(out, REPO_ROOT / a.out, mlflow_cfg, f"onnx_profile/{a.model}", {"model": a.model}, metrics)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
