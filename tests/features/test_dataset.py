"""Dataset builder: CPU rows out, rows without static features counted, optional zoo and PTX joins."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from src.config import compose
from src.features.dataset import DatasetError, build_dataset
from tests.train.tiny import CNNS, GPUS, write_tables


def cfg(tmp, extra=()):
    data = write_tables(tmp)
    c = OmegaConf.to_container(compose([f"{k}={v}" for k, v in data.items()] + list(extra)), resolve=True)
    return c


def test_filters_are_counted(tmp_path):
    c = cfg(tmp_path)
    c["features"]["fill_static_from_same_model"] = False
    df, rep, ptx = build_dataset(tmp_path, c["data"], c["features"], c["target"])
    n_gpu_rows = len(CNNS) * len(GPUS) * 4 * 2 * 2
    # the default feature set joins the PTX counts, which the tiny table has for every CNN GPU row
    assert len(df) == n_gpu_rows and ptx and all(c.startswith("ptx_") for c in ptx)
    assert rep.ptx_imputed_by_source == {} and not [s for s in rep.steps if s["reason"].startswith("no PTX")]
    assert not df["gpu"].str.startswith("cpu:").any()
    steps = {s["reason"].split(":")[0]: s for s in rep.steps}
    assert steps["is_cpu"]["dropped"] == 3
    static = [s for s in rep.steps if s["reason"].startswith("no static")][0]
    assert static["dropped"] == 5 and static["dropped_by_source"] == {"lambda": 5}
    assert rep.rows_in == n_gpu_rows + 8 and rep.rows_out == n_gpu_rows
    assert (df["target"] == pd.read_parquet(tmp_path / "measurements.parquet").set_index("measurement_id")
            .loc[df["measurement_id"], "latency_ms"].to_numpy()).all()


def test_static_feature_table_fills_gaps(tmp_path):
    c = cfg(tmp_path)
    c["features"]["fill_static_from_same_model"] = False
    # a zoo entry at another resolution fills nothing (MACs depend on the input size)
    zoo = pd.DataFrame({"model_key": ["resnet18"], "static_img_size": [299], "param_count_m": [11.69],
                        "gmacs": [3.2], "activations_m": [4.4], "depth": [18], "zoo_source": ["torchvision"]})
    zoo.to_parquet(c["data"]["static_features"])
    df, rep, _ = build_dataset(tmp_path, c["data"], c["features"], c["target"])
    assert (df["source"] == "lambda").sum() == 0
    # the 5 'lambda' rows are 224-px resnet18 rows without static features: a 224-px zoo entry fills them
    zoo["static_img_size"] = 224
    zoo.to_parquet(c["data"]["static_features"])
    df, rep, _ = build_dataset(tmp_path, c["data"], c["features"], c["target"])
    assert (df["source"] == "lambda").sum() == 5
    assert rep.static_filled_from_zoo == {"lambda": 5} and rep.static_features_table is not None


def test_same_model_fill(tmp_path):
    c = cfg(tmp_path)
    df, rep, _ = build_dataset(tmp_path, c["data"], c["features"], c["target"])
    assert rep.static_filled_from_same_model == {"lambda": 5}
    filled = df[df["source"] == "lambda"].iloc[0]
    assert filled["gmacs"] == pytest.approx(1.82) and filled["param_count_m"] == pytest.approx(11.69)


def test_ptx_join_and_missing_table(tmp_path):
    c = cfg(tmp_path, ["features=static_ptx"])
    Path(c["data"]["ptx_counts"]).unlink()
    with pytest.raises(DatasetError, match="PTX count table does not exist"):
        build_dataset(tmp_path, c["data"], c["features"], c["target"])
    keys = pd.read_parquet(c["data"]["measurements"])[["model_key", "img_size", "batch_size"]].drop_duplicates()
    keys = keys[keys["model_key"] != "vgg16"]
    ptx = keys.merge(GPUS[["compute_capability"]], how="cross")
    ptx["ptx_fma"] = np.arange(len(ptx)) * 10.0
    ptx.to_parquet(c["data"]["ptx_counts"])
    df, rep, cols = build_dataset(tmp_path, c["data"], c["features"], c["target"])
    assert cols == ["ptx_fma"] and "vgg16" not in set(df["model_key"])
    assert [s for s in rep.steps if s["reason"].startswith("no PTX")][0]["dropped"] == 4 * 4 * 2 * 2


def test_missing_column_names_file(tmp_path):
    c = cfg(tmp_path)
    pd.read_parquet(c["data"]["gpus"]).drop(columns=["sm_count"]).to_parquet(c["data"]["gpus"])
    with pytest.raises(DatasetError, match=r"gpus.parquet: missing required column\(s\) \['sm_count'\]"):
        build_dataset(tmp_path, c["data"], c["features"], c["target"])


def test_rows_without_ptx_counts_are_kept_for_imputation_or_dropped(tmp_path):
    """The default set keeps a CNN the zoo never counted (the Pipeline imputes its counts) and says how many rows;
    ptx_missing=drop leaves them out, counted; anything else is refused."""
    c = cfg(tmp_path)
    table = pd.read_parquet(c["data"]["ptx_counts"])
    table[table["model_key"] != "vgg16"].to_parquet(c["data"]["ptx_counts"])
    df, rep, cols = build_dataset(tmp_path, c["data"], c["features"], c["target"])
    vgg = df["model_key"] == "vgg16"
    assert c["features"]["ptx_missing"] == "impute" and vgg.sum() == 4 * 4 * 2 * 2
    assert df.loc[vgg, cols].isna().all().all() and df.loc[~vgg, cols].notna().all().all()
    assert rep.ptx_imputed_by_source == {"own": 64}
    c["features"]["ptx_missing"] = "drop"
    df, rep, _ = build_dataset(tmp_path, c["data"], c["features"], c["target"])
    assert "vgg16" not in set(df["model_key"])
    assert [s["dropped"] for s in rep.steps if s["reason"].startswith("no PTX")] == [64]
    c["features"]["ptx_missing"] = "zero"
    with pytest.raises(DatasetError, match="features.ptx_missing='zero': expected 'drop' or 'impute'"):
        build_dataset(tmp_path, c["data"], c["features"], c["target"])
