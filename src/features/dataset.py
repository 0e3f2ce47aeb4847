"""Build the training table: measurements x GPU specs (+ optional static features and PTX counts).

Why a separate step: every model and protocol must see exactly the same rows, and the report must say which rows
were dropped and why (nothing silently dropped).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

STATIC_COLUMNS = ["param_count_m", "gmacs", "activations_m"]
PTX_KEYS = ["model_key", "img_size", "batch_size", "compute_capability"]
# Columns carried through for grouping, reporting and plots (not model inputs).
META_COLUMNS = ["measurement_id", "source", "gpu", "model", "model_key", "family", "framework"]


class DatasetError(ValueError):
    """Raised when an input table is missing or lacks a required column (message names file and column)."""


@dataclass
class DatasetReport:
    """Row accounting of the dataset build: every filter's drop count, by source."""

    rows_in: int = 0
    steps: list[dict] = field(default_factory=list)
    rows_out: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    static_features_table: str | None = None
    static_filled_from_zoo: dict[str, int] = field(default_factory=dict)
    static_filled_from_same_model: dict[str, int] = field(default_factory=dict)
    ptx_table: str | None = None
    # Rows of the final table without PTX counts (features.ptx_missing=impute): the Pipeline imputes them.
    ptx_imputed_by_source: dict[str, int] = field(default_factory=dict)
    # Rows whose (model_key, img_size) has a kernel profile (features with physics: the rest are priced from
    # whole-network numbers).
    layer_profile_rows: int | None = None

    def drop(self, df: pd.DataFrame, keep: pd.Series, reason: str) -> pd.DataFrame:
        """Apply a boolean filter and record how many rows (per source) it removed."""
        removed = df.loc[~keep]
        self.steps.append(
            {
                "reason": reason,
                "dropped": int(len(removed)),
                "dropped_by_source": {str(k): int(v) for k, v in removed["source"].value_counts().items()},
            }
        )
        return df.loc[keep].copy()

    def as_dict(self) -> dict:
        return {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "filters": self.steps,
            "rows_by_source": self.by_source,
            "rows_by_gpu": self.gpus,
            "static_features_table": self.static_features_table,
            "static_filled_from_zoo": self.static_filled_from_zoo,
            "static_filled_from_same_model": self.static_filled_from_same_model,
            "ptx_table": self.ptx_table,
            "ptx_imputed_by_source": self.ptx_imputed_by_source,
            "layer_profile_rows": self.layer_profile_rows,
        }


def read_table(path: Path, required: list[str]) -> pd.DataFrame:
    """Read a Parquet table and check required columns, naming the file in any error."""
    if not path.exists():
        raise DatasetError(f"{path}: file not found (run `dvc repro ingest` / `python -m src.ingest` first)")
    df = pd.read_parquet(path)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DatasetError(f"{path}: missing required column(s) {missing}; has {list(df.columns)}")
    return df


def join_static(meas: pd.DataFrame, static: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, pd.Series]:
    """Fill static CNN features from a model-zoo table where the measurement row lacks them.

    Key: model_key, plus the input size when the zoo says which one it measured (`static_img_size` or
    `img_size`): MACs and activations depend on the resolution, so a 224-px zoo entry fills only 224-px rows.
    Values measured with the row (timm's own columns) win; the zoo only fills gaps. Extra numeric zoo columns
    (depth, layer counts, ...) are added for feature sets that list them. Returns (frame, filled-row mask).
    """
    size_col = next((c for c in ("static_img_size", "img_size") if c in static.columns), None)
    keys = ["model_key"] + ([size_col] if size_col else [])
    if static.duplicated(keys).any():
        dups = static.loc[static.duplicated(keys), "model_key"].head(5).tolist()
        raise DatasetError(f"{path}: duplicate {keys} values, e.g. {dups}")
    numeric = [c for c in static.columns if c not in keys and pd.api.types.is_numeric_dtype(static[c])]
    zoo = static[keys + numeric].rename(columns={c: f"{c}__zoo" for c in numeric})
    if size_col:
        zoo = zoo.rename(columns={size_col: "img_size"})
    merged = meas.merge(zoo, on=["model_key"] + (["img_size"] if size_col else []), how="left")
    before = merged[STATIC_COLUMNS].notna().all(axis=1)
    for col in numeric:
        if col in merged.columns:
            merged[col] = merged[col].where(merged[col].notna(), merged[f"{col}__zoo"])
        else:
            merged[col] = merged[f"{col}__zoo"]
    merged = merged.drop(columns=[f"{c}__zoo" for c in numeric])
    filled = merged[STATIC_COLUMNS].notna().all(axis=1) & ~before
    return merged, filled


def fill_static_same_model(df: pd.DataFrame, reference: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Fill missing static features from other rows of the same (model_key, img_size).

    Why: static features are properties of the network and input size, not of the GPU or run; timm lists them
    only in its inference files, so its training rows and other sources' rows of the same model at the same
    resolution get them from there (median over the rows that have them). Returns (frame, filled-row mask).
    """
    have = reference[STATIC_COLUMNS].notna().all(axis=1)
    ref = reference.loc[have].groupby(["model_key", "img_size"])[STATIC_COLUMNS].median()
    missing = df[STATIC_COLUMNS].isna().any(axis=1)
    keys = pd.MultiIndex.from_frame(df.loc[missing, ["model_key", "img_size"]])
    found = ref.reindex(keys)
    filled = pd.Series(False, index=df.index)
    ok = found.notna().all(axis=1).to_numpy()
    idx = df.index[missing][ok]
    df = df.copy()
    df.loc[idx, STATIC_COLUMNS] = found.to_numpy()[ok]
    filled.loc[idx] = True
    return df, filled


def join_ptx(df: pd.DataFrame, ptx: pd.DataFrame, prefix: str, path: Path) -> tuple[pd.DataFrame, list[str]]:
    """Join executed-PTX count features on (model_key, img_size, batch_size, compute_capability)."""
    cols = [c for c in ptx.columns if c.startswith(prefix)]
    if not cols:
        raise DatasetError(f"{path}: no feature columns starting with {prefix!r}")
    if ptx.duplicated(PTX_KEYS).any():
        raise DatasetError(f"{path}: duplicate rows for key {PTX_KEYS}")
    return df.merge(ptx[PTX_KEYS + cols], on=PTX_KEYS, how="left"), cols


def build_dataset(
    root: Path,
    data_cfg: dict,
    feat_cfg: dict,
    target_cfg: dict,
    seed: int = 42,
) -> tuple[pd.DataFrame, DatasetReport, list[str]]:
    """Join, filter and return (table, report, ptx feature columns).

    The table holds META_COLUMNS, the raw model inputs (numeric, categorical, GPU specs, PTX counts) and
    `target` (the configured target column, original scale).
    """
    gpu_cols = list(feat_cfg["gpu_features"])
    meas = read_table(
        root / data_cfg["measurements"],
        META_COLUMNS + ["is_cpu", "num_gpus"] + list(feat_cfg["categorical_inputs"]) + ["batch_size", "img_size"],
    )
    gpus = read_table(root / data_cfg["gpus"], ["gpu"] + gpu_cols)
    report = DatasetReport(rows_in=len(meas))
    for col in STATIC_COLUMNS:
        if col not in meas.columns:
            meas[col] = np.nan

    df = report.drop(meas, ~meas["is_cpu"].astype(bool), "is_cpu: CPU rows are not GPU measurements")
    if data_cfg.get("max_num_gpus") is not None:
        df = report.drop(df, df["num_gpus"] <= int(data_cfg["max_num_gpus"]), "num_gpus above max_num_gpus")
    if data_cfg.get("cnn_only") and "is_cnn" in df.columns:
        df = report.drop(df, df["is_cnn"].astype(bool), "not a CNN (is_cnn=false) [data.cnn_only=true]")
    if data_cfg.get("data_modes") and "data_mode" in df.columns:
        modes = list(data_cfg["data_modes"])
        df = report.drop(df, df["data_mode"].isin(modes), f"data_mode not in data.data_modes={modes}")

    static_path = root / data_cfg["static_features"]
    if static_path.exists():
        static = read_table(static_path, ["model_key"])
        df, filled = join_static(df.reset_index(drop=True), static, static_path)
        report.static_features_table = str(data_cfg["static_features"])
        report.static_filled_from_zoo = {str(k): int(v) for k, v in df.loc[filled, "source"].value_counts().items()}
    if feat_cfg.get("fill_static_from_same_model", True):
        df, filled = fill_static_same_model(df, meas)
        report.static_filled_from_same_model = {
            str(k): int(v) for k, v in df.loc[filled, "source"].value_counts().items()}

    df = df.merge(gpus[["gpu"] + gpu_cols], on="gpu", how="left", validate="many_to_one")
    df = report.drop(df, df[gpu_cols].notna().all(axis=1), "GPU not in gpus table or GPU spec missing")

    ptx_cols: list[str] = []
    if feat_cfg.get("use_ptx"):
        ptx_path = root / data_cfg["ptx_counts"]
        if not ptx_path.exists():
            raise DatasetError(f"{ptx_path}: features.use_ptx=true but the PTX count table does not exist")
        df, ptx_cols = join_ptx(df, read_table(ptx_path, PTX_KEYS), feat_cfg["ptx_prefix"], ptx_path)
        report.ptx_table = str(data_cfg["ptx_counts"])
        counted = df[ptx_cols].notna().all(axis=1)
        missing = feat_cfg.get("ptx_missing", "drop")
        if missing == "drop":
            df = report.drop(df, counted, "no PTX counts for (model, size, batch, cc)")
        elif missing != "impute":
            raise DatasetError(f"features.ptx_missing={missing!r}: expected 'drop' or 'impute'")

    for col in feat_cfg.get("open_categorical") or []:
        df[col] = df[col].fillna("unknown").astype(str).replace("", "unknown")
    needed = [c for c in feat_cfg["numeric_inputs"] if c not in STATIC_COLUMNS]
    df = report.drop(df, df[needed + list(feat_cfg["categorical_inputs"])].notna().all(axis=1),
                     "missing run configuration (batch, size, precision, mode, layout, compile)")
    static_needed = [c for c in feat_cfg["numeric_inputs"] if c in STATIC_COLUMNS]
    has_static = df[static_needed].notna().all(axis=1) & (df[static_needed] > 0).all(axis=1)
    reason = "no static CNN features (param_count_m, gmacs, activations_m)" + (
        " [features.require_static=true]" if feat_cfg.get("require_static", True) else
        " [features.require_static=false, but the regressors need them]")
    df = report.drop(df, has_static, reason)

    tcol = target_cfg["column"]
    if tcol not in df.columns:
        raise DatasetError(f"{root / data_cfg['measurements']}: target column {tcol!r} not present")
    tgt = pd.to_numeric(df[tcol], errors="coerce")
    df = report.drop(df, tgt.notna() & np.isfinite(tgt) & (tgt > 0), f"target {tcol} missing or not > 0")
    df["target"] = pd.to_numeric(df[tcol]).astype(float)

    if data_cfg.get("max_rows") and len(df) > int(data_cfg["max_rows"]):
        keep = pd.Series(False, index=df.index)
        keep.loc[df.sample(n=int(data_cfg["max_rows"]), random_state=seed).index] = True
        df = report.drop(df, keep, f"subsample to data.max_rows={data_cfg['max_rows']}")

    inputs = list(feat_cfg["numeric_inputs"]) + list(feat_cfg["categorical_inputs"]) + gpu_cols + ptx_cols
    cols = list(dict.fromkeys(META_COLUMNS + inputs + ["target"]))
    out = df[cols].reset_index(drop=True)
    for c in feat_cfg["categorical_inputs"]:
        out[c] = out[c].astype(str)
    report.rows_out = len(out)
    if ptx_cols:  # rows of the final table whose counts the Pipeline imputes (features.ptx_missing=impute)
        imputed = out[ptx_cols].isna().any(axis=1)
        report.ptx_imputed_by_source = {str(k): int(v) for k, v in out.loc[imputed, "source"].value_counts().items()}
    report.by_source = {str(k): int(v) for k, v in out["source"].value_counts().items()}
    report.gpus = {str(k): int(v) for k, v in out["gpu"].value_counts().items()}
    return out, report, ptx_cols


def write_dataset(c: dict, root: Path | None = None) -> DatasetReport:
    """Build the table of a resolved config and write it to `data.dataset` and the report; returns the report."""
    from src.config import REPO_ROOT

    root = root or REPO_ROOT
    df, report, ptx = build_dataset(root, c["data"], c["features"], c["target"], seed=c["seed"])
    profiles = None
    if c["data"].get("kernel_profiles"):
        from src.features.kernels import write_profiles

        profiles = write_profiles(root / c["data"]["layers"], root / c["data"]["kernel_profiles"])
        if c["features"].get("physics"):
            keys = set(zip(profiles["model_key"], profiles["img_size"], strict=True))
            pairs = list(zip(df["model_key"].astype(str), df["img_size"].astype(int), strict=True))
            report.layer_profile_rows = int(sum(p in keys for p in pairs))
    out = root / c["data"]["dataset"]
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out, index=False)
    rep_dir = root / c["reports_dir"]
    rep_dir.mkdir(parents=True, exist_ok=True)
    summary = {"features": c["features"]["name"], "target": c["target"]["name"], "ptx_features": ptx,
               **report.as_dict()}
    (rep_dir / "dataset.json").write_text(json.dumps(summary, indent=2) + "\n")
    return report
