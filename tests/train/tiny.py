"""A tiny measurement table in the real schema (docs/data-schema.md) for tests.

Static CNN features are real timm values (benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv) and GPU specs are
real TechPowerUp numbers; latencies follow a roofline-plus-overhead law with 5 % log-normal noise, because a
fresh clone has no processed data (DVC outputs are not in git).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

# model: (family, img_size, param_count_m, gmacs, activations_m)
CNNS = {
    "resnet18": ("resnet", 224, 11.69, 1.82, 2.48), "resnet50": ("resnet", 224, 25.56, 4.11, 11.11),
    "resnet101": ("resnet", 224, 44.55, 7.83, 16.23), "densenet121": ("densenet", 224, 7.98, 2.87, 6.90),
    "densenet169": ("densenet", 224, 14.15, 3.40, 7.30),
    "efficientnet_b0": ("efficientnet", 224, 5.29, 0.40, 6.75),
    "efficientnet_b3": ("efficientnet", 320, 12.23, 2.01, 26.52),
    "mobilenetv2_100": ("mobilenet", 224, 3.50, 0.31, 6.68),
    "mobilenetv3_large_100": ("mobilenet", 224, 5.48, 0.23, 4.41), "vgg11": ("vgg", 224, 132.86, 7.61, 7.44),
    "vgg16": ("vgg", 224, 138.36, 15.47, 13.56), "convnext_tiny": ("convnext", 224, 28.59, 4.47, 13.44),
    "regnety_016": ("regnet", 224, 11.20, 1.63, 8.04), "inception_v3": ("inception", 299, 23.83, 5.73, 8.97),
}
GPUS = pd.DataFrame([
    # gpu, arch, cc, year, bw, bus, mem, type, memclk, sm, shading, tc, base, boost, l1, l2, fp16, fp32, fp64,
    # tensor fp16, tdp
    ["GeForce RTX 3090", "Ampere", 8.6, 2020, 936.2, 384, 24.0, "GDDR6X", 1219, 82, 10496, 328, 1395, 1695, 128, 6.0,
     35.58, 35.58, 0.556, 71.16, 350],
    ["GeForce RTX 4090", "Ada Lovelace", 8.9, 2022, 1008.0, 384, 24.0, "GDDR6X", 1313, 128, 16384, 512, 2235, 2520,
     128, 72.0, 82.58, 82.58, 1.29, 165.2, 450],
    ["GeForce RTX 5090", "Blackwell 2.0", 12.0, 2025, 1792.0, 512, 32.0, "GDDR7", 1750, 170, 21760, 680, 2017, 2407,
     128, 96.0, 104.8, 104.8, 1.637, 209.5, 575],
    ["Tesla V100 PCIe 16 GB", "Volta", 7.0, 2017, 897.0, 4096, 16.0, "HBM2", 876, 80, 5120, 640, 1245, 1380, 128,
     6.0, 28.26, 14.13, 7.066, 112.0, 250],
], columns=["gpu", "architecture", "compute_capability", "release_year", "memory_bandwidth_gbs", "memory_bus_bits",
            "memory_size_gb", "memory_type", "memory_clock_mhz", "sm_count", "shading_units", "tensor_cores",
            "base_clock_mhz", "boost_clock_mhz", "l1_cache_kb", "l2_cache_mb", "fp16_tflops", "fp32_tflops",
            "fp64_tflops", "tensor_fp16_tflops", "tdp_w"])


def measurements(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    specs = GPUS.set_index("gpu")
    for model, (family, img, params, gmacs, acts) in CNNS.items():
        for gpu, g in specs.iterrows():
            for batch in (1, 8, 32, 128):
                for precision in ("fp32", "amp_fp16"):
                    for mode in ("inference", "training"):
                        k = 3.0 if mode == "training" else 1.0
                        bpe = 4.0 if precision == "fp32" else 2.0
                        peak = (g.fp32_tflops if precision == "fp32" else g.tensor_fp16_tflops) * 1e12 * 0.4
                        t_c = 2 * gmacs * 1e9 * batch * k / peak
                        t_m = (params * 1e6 * bpe * (4 if k > 1 else 1) + 2 * acts * 1e6 * batch * bpe * k) / (
                            g.memory_bandwidth_gbs * 1e9 * 0.7)
                        lat = (max(t_c, t_m) * 1e3 + 0.05 * k * (1 + params / 50)) * rng.lognormal(0, 0.05)
                        rows.append({
                            "measurement_id": f"own:tiny.csv:{len(rows)}", "source": "own",
                            "source_file": "tiny.csv", "upstream_commit": "", "gpu": gpu, "device_raw": gpu,
                            "is_cpu": False, "num_gpus": 1, "framework": "pytorch", "framework_version": "2.4.0",
                            "cuda_version": "12.4", "precision": precision, "memory_layout": "nchw",
                            "compile_mode": "eager", "model": model, "model_key": model, "model_source": "timm",
                            "family": family, "img_size": img, "batch_size": batch, "mode": mode,
                            "latency_ms": lat, "throughput": batch / lat * 1e3, "latency_stat": "mean",
                            "latency_spread_ms": np.nan, "n_samples": 50.0, "param_count_m": params,
                            "gmacs": gmacs, "activations_m": acts})
    df = pd.DataFrame(rows)
    cpu = df.iloc[:3].copy()
    cpu["gpu"], cpu["is_cpu"], cpu["measurement_id"] = "cpu:i9_10940x", True, ["own:cpu:0", "own:cpu:1", "own:cpu:2"]
    nostatic = df.iloc[:5].copy()
    nostatic[["param_count_m", "gmacs", "activations_m"]] = np.nan
    nostatic["source"] = "lambda"
    nostatic["measurement_id"] = [f"lambda:x:{i}" for i in range(5)]
    return pd.concat([df, cpu, nostatic], ignore_index=True)


def _compiled_batch(idx, model_key: str, img_size: int, batch: int, cc: float) -> int | None:
    """The compiled batch the index prices this row from (its rule: PtxIndex.lookup); None if never counted."""
    from src.features.ptx_lookup import cc_arch_number

    archs = idx.entries.get((str(model_key), int(img_size)))
    if archs is None:
        return None
    batches = [b for b, _ in archs[idx._arch(int(cc_arch_number(np.array([cc]))[0]), archs)]]
    below = [b for b in batches if b <= batch]
    return max(below) if below else min(batches)


def ptx_counts(meas: pd.DataFrame) -> pd.DataFrame:
    """The `ptx` stage's table for the tiny measurements: the real executed counts of these CNNs (committed
    data/processed/ptx_counts.parquet, compiled at batch 1 and for some at 32) expanded to every measured (batch, cc)
    by its rules."""
    from src.config import REPO_ROOT
    from src.features.ptx_lookup import load_ptx_index

    idx = load_ptx_index(str(REPO_ROOT / "data" / "processed" / "ptx_counts.parquet"))
    keys = meas.loc[~meas["is_cpu"], ["model_key", "img_size", "batch_size", "gpu"]].merge(
        GPUS[["gpu", "compute_capability"]], on="gpu").drop(columns="gpu").drop_duplicates().reset_index(drop=True)
    compiled = [_compiled_batch(idx, *k) for k in keys.itertuples(index=False)]  # 1, or 32 where compiled at 32
    method = [("compiled" if b == c else f"proportional_b{c}") if c else "compiled"
              for b, c in zip(keys["batch_size"], compiled, strict=True)]
    out = keys.assign(nvcc_arch=np.where(keys["compute_capability"] >= 12.0, "sm_120", "sm_75"), count_method=method)
    return pd.concat([out, pd.DataFrame(idx.lookup(keys), columns=idx.columns)], axis=1)


def write_tables(folder: Path, seed: int = 0) -> dict[str, str]:
    """Write measurements.parquet, gpus.parquet and ptx_counts.parquet into `folder`; return data-config
    overrides (absolute)."""
    folder.mkdir(parents=True, exist_ok=True)
    meas = measurements(seed)
    meas.to_parquet(folder / "measurements.parquet", index=False)
    GPUS.to_parquet(folder / "gpus.parquet", index=False)
    ptx_counts(meas).to_parquet(folder / "ptx_counts.parquet", index=False)
    return {
        "data.measurements": str(folder / "measurements.parquet"),
        "data.gpus": str(folder / "gpus.parquet"),
        "data.static_features": str(folder / "static_features.parquet"),
        "data.ptx_counts": str(folder / "ptx_counts.parquet"),
        "data.dataset": str(folder / "dataset.parquet"),
        "data.kernel_profiles": str(folder / "kernel_profiles.parquet"),
    }


ALL_PROTOCOLS = "[random,random_rows,leave_model_out,leave_gpu_out,leave_family_out,leave_arch_out]"


def overrides(tmp: Path, n_trials: int = 2, protocols: str = ALL_PROTOCOLS) -> list[str]:
    """Hydra overrides for a quick, isolated run: tiny tables, temp MLflow/Optuna stores, few trials."""
    from omegaconf import OmegaConf

    from src.config import compose
    from src.features.dataset import write_dataset

    data = write_tables(tmp / "data")
    ov = [f"{k}={v}" for k, v in data.items()]
    ov += [
        f"mlflow.tracking_uri=sqlite:///{tmp}/mlflow.db", f"mlflow.artifact_root=file://{tmp}/mlartifacts",
        f"sweep.storage=sqlite:///{tmp}/optuna.db", f"sweep.n_trials={n_trials}", f"sweep.n_trials_slow={n_trials}",
        # every model, the distilled Decision Tree too (one trial in the main job), gets the tests' trials
        f"model.n_trials={n_trials}",
        "sweep.cv_folds=2", "sweep.perm_max_rows=200", "sweep.perm_repeats=1", "sweep.n_jobs=1",
        f"reports_dir={tmp}/reports", f"split.protocols={protocols}", "split.leave_family_out.n_groups=3",
        "split.leave_model_out.n_groups=3",
        # threads: a spawned fold worker costs seconds of imports, more than a tiny fold; tests/train/test_fold_jobs.py
        # checks that worker processes give the same numbers
        "progress=false", "sweep.fold_backend=thread",
    ]
    write_dataset(OmegaConf.to_container(compose(ov), resolve=True))  # the `features` stage: train reads its table
    return ov


_TRAINED: dict = {}


def trained_store(base: Path, models: tuple[str, ...] = ("dt", "lr"), protocols: str = ALL_PROTOCOLS) -> dict:
    """Train `models` on the tiny table into a temp MLflow/Optuna store and register; cached per process.

    `protocols`: a Hydra list; `register` needs only `random` (the served run), so tests that only serve a model
    train just that.
    Returns {"tmp": folder, "cfg": resolved config dict, "summaries": {...}, "registry": {...}}.
    """
    key = (str(base), models, protocols)
    if key in _TRAINED:
        return _TRAINED[key]
    from omegaconf import OmegaConf

    from src.config import compose
    from src.register.__main__ import run_register
    from src.train.run import train

    ov = overrides(base, protocols=protocols)
    summaries = {}
    for m in models:
        c = OmegaConf.to_container(compose(ov + [f"model={m}"]), resolve=True)
        summaries[m] = train(c)
    # The evaluate stage's metrics.json names the runs register registers (the champion is the reported run).
    import json

    from src.evaluate.__main__ import collect

    table, _ = collect(base / "reports", models)
    (base / "metrics.json").write_text(json.dumps(table))
    c = OmegaConf.to_container(compose(ov + [f"register.metrics={base / 'metrics.json'}", "register.allow_dirty=true"]),
                               resolve=True)
    _TRAINED[key] = {"tmp": base, "cfg": c, "overrides": ov, "summaries": summaries, "registry": run_register(c)}
    return _TRAINED[key]
