"""Held-out predictions of an earlier commit's pipeline run against the workspace's, on the same measurement ids.

The train stage's predictions (reports/train/<model>/<protocol>/predictions.csv) are DVC outputs: the earlier
run's are read from the local DVC cache through that commit's dvc.lock, so no re-run is needed. Per model and
protocol: MAPE % before and after on the rows both runs held out, the same for the rows of `--gpus` (e.g. the
GPU whose data changed), and the after-MAPE of rows only the new run has. (The random protocols split
configurations afresh when rows are added, so only the grouped protocols hold the same rows out.)

    python benchmarks/same_rows_before_after.py --before a2c3be0 --gpus "H200 SXM 141 GB" --tag h100_rows
    python benchmarks/same_rows_before_after.py --before 22f4816 --model-keys 'dm_nfnet_*' --tag gates

`--model-keys` (shell patterns of model keys) reports those CNNs' rows apart, as `--gpus` does for GPUs.

Writes reports/bench/same_rows_<tag>.csv and .json and logs an MLflow run `benchmark/same_rows/<tag>`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.config import REPO_ROOT, compose  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402

MODELS = ("lr", "knn", "rf", "dt", "xgb")
PROTOCOLS = ("random", "random_rows", "leave_model_out", "leave_gpu_out", "leave_family_out", "leave_arch_out",
             "leave_runtime_out")
CACHE = REPO_ROOT / ".dvc" / "cache" / "files" / "md5"


def cached_file(md5: str) -> Path:
    path = CACHE / md5[:2] / md5[2:]
    if not path.exists():
        raise SystemExit(f"{path} is not in the local DVC cache (that run's outputs were never cached here)")
    return path


def earlier_predictions(lock: dict, model: str, protocol: str) -> pd.DataFrame:
    """predictions.csv of reports/train/<model>/<protocol> as the earlier dvc.lock recorded it."""
    outs = {o["path"]: o["md5"] for o in lock["stages"][f"train@{model}"]["outs"]}
    listing = json.loads(cached_file(outs[f"reports/train/{model}/{protocol}"]).read_text())
    entry = next(e for e in listing if e["relpath"] == "predictions.csv")
    return pd.read_csv(cached_file(entry["md5"]))


def ape(frame: pd.DataFrame, suffix: str = "") -> pd.Series:
    return (frame[f"predicted{suffix}"] - frame[f"measured{suffix}"]).abs() / frame[f"measured{suffix}"] * 100


def matches(keys: pd.Series, patterns: list[str]) -> np.ndarray:
    """Which model keys match one of the shell patterns."""
    return keys.astype(str).map(lambda k: any(fnmatch.fnmatchcase(k, p) for p in patterns)).to_numpy(dtype=bool)


def compare(before: pd.DataFrame, after: pd.DataFrame, gpus: list[str], model_keys: list[str] | None = None) -> dict:
    same = before.merge(after, on="measurement_id", suffixes=("_b", "_a"))
    eb, ea = ape(same, "_b"), ape(same, "_a")
    new = after[~after["measurement_id"].isin(before["measurement_id"])]
    out = {"same_rows": int(len(same)), "mape_before": float(eb.mean()), "mape_after": float(ea.mean())}
    focus = {"gpus": same["gpu_a"].isin(gpus).to_numpy()}
    if model_keys:
        focus["keys"] = matches(same["model_key_a"], model_keys)
    for name, rows in focus.items():
        out.update({f"{name}_rows": int(rows.sum()),
                    f"{name}_mape_before": float(eb[rows].mean()) if rows.any() else np.nan,
                    f"{name}_mape_after": float(ea[rows].mean()) if rows.any() else np.nan})
    out.update({"new_rows": int(len(new)), "new_rows_mape": float(ape(new).mean()) if len(new) else np.nan})
    if model_keys:
        mine = new[matches(new["model_key"], model_keys)]
        out.update({"keys_new_rows": int(len(mine)),
                    "keys_new_rows_mape": float(ape(mine).mean()) if len(mine) else np.nan})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="commit whose dvc.lock names the earlier run")
    ap.add_argument("--gpus", default="", help="comma-separated GPU names to report apart")
    ap.add_argument("--model-keys", default="", help="comma-separated model-key shell patterns to report apart")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--no-mlflow", action="store_true")
    args = ap.parse_args()
    text = subprocess.run(["git", "show", f"{args.before}:dvc.lock"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True).stdout
    lock = yaml.safe_load(text)
    gpus = [g for g in args.gpus.split(",") if g]
    model_keys = [k for k in args.model_keys.split(",") if k]
    rows = []
    for model in MODELS:
        for protocol in PROTOCOLS:
            after = pd.read_csv(REPO_ROOT / "reports" / "train" / model / protocol / "predictions.csv")
            rows.append({"model": model, "protocol": protocol,
                         **compare(earlier_predictions(lock, model, protocol), after, gpus, model_keys)})
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    out = REPO_ROOT / "reports" / "bench" / f"same_rows_{args.tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out.with_suffix(".csv"), index=False)
    xgb = table[table["model"] == "xgb"].set_index("protocol")
    metrics = {f"xgb_{p}_{k}": float(xgb.loc[p, k]) for p in xgb.index for k in ("mape_before", "mape_after")
               if np.isfinite(xgb.loc[p, k])}
    c = compose([])
    record_benchmark({"before": args.before, "gpus": gpus, "model_keys": model_keys, "rows": rows}, out,
                     None if args.no_mlflow else dict(c["mlflow"]), f"benchmark/same_rows/{args.tag}",
                     {"before": args.before}, metrics, artifacts=[out.with_suffix(".csv")])
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
