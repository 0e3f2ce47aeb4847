"""src.evaluate's GPU-ranking check on small per-model reports laid out as src.train writes them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from src.evaluate.__main__ import (
    configurations,
    mape_over_best,
    markdown,
    rankings,
    support_markdown,
    support_tables,
)

GPUS = ["A100", "V100", "T4", "RTX 3090"]
SPEED = {"A100": 1.0, "V100": 1.6, "T4": 4.0, "RTX 3090": 1.3}


def dataset(path) -> pd.DataFrame:
    rows = []
    for model, family in (("resnet50", "resnet"), ("resnet18", "resnet"), ("densenet121", "densenet")):
        for batch in (1, 32):
            for gpu in GPUS:
                rows.append({"measurement_id": f"{model}:{batch}:{gpu}", "source": "timm", "model_key": model,
                             "family": family, "mode": "inference", "precision": "fp32", "memory_layout": "nchw",
                             "compile_mode": "tensorrt" if model == "densenet121" else "eager",
                             "batch_size": batch, "img_size": 224, "gpu": gpu,
                             "target": SPEED[gpu] * batch * (2.0 if model == "densenet121" else 1.0)})
    df = pd.DataFrame(rows)
    df.to_parquet(path, index=False)
    return df


def write_predictions(rep, model: str, protocol: str, df: pd.DataFrame, predicted: np.ndarray,
                      support: np.ndarray | None = None) -> None:
    folder = rep / model / protocol
    folder.mkdir(parents=True)
    pd.DataFrame({"measurement_id": df["measurement_id"], "gpu": df["gpu"], "model": df["model_key"],
                  "model_key": df["model_key"], "family": df["family"], "runtime": df["compile_mode"],
                  "measured": df["target"], "predicted": predicted,
                  "setting_support": np.full(len(df), "seen") if support is None else support}).to_csv(
        folder / "predictions.csv", index=False)


def test_rank_keys_and_family_table(tmp_path):
    df = dataset(tmp_path / "dataset.parquet")
    rep = tmp_path / "reports"
    y = df["target"].to_numpy()
    # dt gets the order right everywhere; xgb swaps A100 and RTX 3090 on densenet (wrong fastest GPU there)
    swapped = y.copy()
    dn = df["model_key"].eq("densenet121").to_numpy()
    swapped[dn & df["gpu"].eq("A100").to_numpy()] *= 1.5
    write_predictions(rep, "dt", "leave_family_out", df, y * 1.1)
    write_predictions(rep, "xgb", "leave_family_out", df, swapped)
    table = {"leave_family_out": {m: {"mape": 1.0, "median_ape": 1.0, "within_10pct": 1.0, "r2": 1.0, "adj_r2": 1.0,
                                      "r2_log": 1.0} for m in ("dt", "xgb")}}
    fam, runtimes, speedups = rankings(rep, table, configurations(tmp_path / "dataset.parquet"))
    dt, xgb = table["leave_family_out"]["dt"], table["leave_family_out"]["xgb"]
    assert dt["rank_configs"] == 6 and dt["rank_gpus_mean"] == 4.0
    assert dt["rank_spearman_median"] == 1.0 and dt["rank_top1_share"] == 1.0
    assert np.isnan(dt["rank_top1_miss_slowdown_median"])  # nothing missed
    assert xgb["rank_top1_share"] == pytest.approx(4 / 6)
    assert xgb["rank_top1_miss_slowdown_median"] == pytest.approx(1.3)
    row = fam.set_index(["estimator", "family"]).loc[("xgb", "densenet")]
    assert row["configs"] == 2 and row["top1_share"] == 0.0 and row["top1_miss_slowdown_median"] == pytest.approx(1.3)
    assert "| 1.000 | 1.000 (6) |" in markdown(table)
    # MAPE per runtime: dt is 10 % high on every row; xgb is 50 % high on the 2 densenet (TensorRT) A100 rows of 8
    assert dt["mape_by_runtime"] == {"eager": pytest.approx(10.0), "tensorrt": pytest.approx(10.0)}
    assert xgb["mape_by_runtime"] == {"eager": 0.0, "tensorrt": pytest.approx(50.0 * 2 / 8)}
    r = runtimes[runtimes["estimator"].eq("xgb")].set_index("runtime")
    assert r.loc["tensorrt", ["rows", "cnns", "gpus"]].tolist() == [8, 1, 4]
    assert r.loc["eager", ["rows", "cnns", "gpus"]].tolist() == [16, 2, 4]
    assert set(runtimes["protocol"]) == {"leave_family_out"}
    assert speedups.empty and dt["speedup_vs_eager"] == {}  # no CNN here is measured both ways


def test_stale_predictions_are_named(tmp_path):
    df = dataset(tmp_path / "dataset.parquet")
    rep = tmp_path / "reports"
    write_predictions(rep, "dt", "random", df.assign(measurement_id=df["measurement_id"] + "-old"),
                      df["target"].to_numpy())
    table = {"random": {"dt": {}}}
    with pytest.raises(SystemExit, match=r"dt/random/predictions.csv: 24 row\(s\) \(e.g. resnet50:1:A100-old\) are "
                                         r"not in the dataset: the reports are stale"):
        rankings(rep, table, configurations(tmp_path / "dataset.parquet"))


def test_support_tables_split_each_group_by_what_training_knew_of_the_setting(tmp_path):
    df = dataset(tmp_path / "dataset.parquet")
    rep = tmp_path / "reports"
    y = df["target"].to_numpy()
    # the T4's rows were measured in a setup no training row has (40 % off), the V100's under another release only
    # (20 % off); the rest 10 % off
    t4, v100 = df["gpu"].eq("T4").to_numpy(), df["gpu"].eq("V100").to_numpy()
    write_predictions(rep, "xgb", "leave_gpu_out", df, np.where(t4, y * 1.4, np.where(v100, y * 1.2, y * 1.1)),
                      support=np.where(t4, "unseen", np.where(v100, "other_release", "seen")))
    metrics = {"mape": 17.5, "test_rows": 24, "seen_setting_rows": 12.0, "seen_setting_mape": 10.0,
               "other_release_setting_rows": 6.0, "other_release_setting_mape": 20.0, "unseen_setting_rows": 6.0,
               "unseen_setting_mape": 40.0}
    table = {"leave_gpu_out": {"xgb": metrics}}
    out = support_tables(rep, table)
    assert set(out["protocol"]) == {"leave_gpu_out"} and out["rows"].sum() == 24
    t = out.set_index(["group", "setting"])
    assert t.loc[("T4", "unseen"), ["rows", "mape"]].tolist() == [6, pytest.approx(40.0)]
    assert t.loc[("V100", "other_release"), ["rows", "mape"]].tolist() == [6, pytest.approx(20.0)]
    assert ("T4", "seen") not in t.index  # an empty level is left out, not scored 0
    assert t.loc[("A100", "seen"), ["rows", "mape"]].tolist() == [6, pytest.approx(10.0)]
    assert "| leave_gpu_out | xgb | 17.50 (24) | 10.00 (12) | 20.00 (6) | 40.00 (6) |" in support_markdown(table)


def test_support_tables_name_predictions_without_the_setting_label(tmp_path):
    df = dataset(tmp_path / "dataset.parquet")
    rep = tmp_path / "reports"
    write_predictions(rep, "dt", "leave_gpu_out", df, df["target"].to_numpy())
    path = rep / "dt" / "leave_gpu_out" / "predictions.csv"
    pd.read_csv(path).drop(columns="setting_support").to_csv(path, index=False)
    with pytest.raises(SystemExit, match=r"dt/leave_gpu_out/predictions.csv: predictions lack column\(s\) "
                                         r"\['setting_support'\]: the reports are stale"):
        support_tables(rep, {"leave_gpu_out": {"dt": {}}})


def test_mape_over_best_is_each_models_mape_over_the_protocols_lowest():
    table = {"random": {"dt": {"mape": 9.0}, "xgb": {"mape": 7.5}, "lr": {"mape": 15.0}},
             "leave_gpu_out": {"dt": {"mape": 20.0}, "xgb": {"mape": np.nan}}}
    out = mape_over_best(table)
    assert out["random"]["dt"]["mape_over_best"] == pytest.approx(1.2)
    assert out["random"]["xgb"]["mape_over_best"] == pytest.approx(1.0)
    assert out["random"]["lr"]["mape_over_best"] == pytest.approx(2.0)
    # a model without a finite MAPE is no yardstick, and gets no ratio itself
    assert out["leave_gpu_out"]["dt"]["mape_over_best"] == pytest.approx(1.0)
    assert np.isnan(out["leave_gpu_out"]["xgb"]["mape_over_best"])
