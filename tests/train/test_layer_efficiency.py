"""Layer-level efficiency model on a real slice of the single-layer table (the ingest stage's parsers)."""

import numpy as np
import pandas as pd
import pytest

from src.ingest.gpus import UnknownGPUError
from src.ingest.layers import validate_layers
from src.ingest.manifest import load_manifest
from src.ingest.sources import deepbench, neusight
from src.train import layer_efficiency as le
from tests.ingest.conftest import MIRROR


@pytest.fixture(scope="module")
def layers():
    """NeuSight and DeepBench rows on four GPUs (a few thousand real layers)."""
    mirror = MIRROR
    manifest = load_manifest()
    files = {rel: mirror / rel for rel in manifest if rel.startswith(("sitar-lab-NeuSight", "baidu-research"))}
    commits = {rel: e.commit for rel, e in manifest.items()}
    rows = neusight.parse(files, commits).rows + deepbench.parse(files, commits).rows
    frame, _ = validate_layers(rows)
    keep = ["Tesla T4", "Tesla P4", "Tesla V100 PCIe 32 GB", "Tesla P100 PCIe 16 GB"]
    frame = frame[frame["gpu"].isin(keep)]
    return frame.groupby("gpu", group_keys=False).sample(n=700, random_state=0)


@pytest.fixture(scope="module")
def cfg():
    return {**le.DEFAULTS, "xgb": {**le.DEFAULTS["xgb"], "n_estimators": 80}}


@pytest.fixture(scope="module")
def preds(layers, cfg):
    return le.leave_gpu_out(le.physics_frame(layers), cfg, progress=False)


def test_every_gpu_is_held_out_once_on_all_its_rows(layers, preds):
    assert sorted(preds["gpu"].unique()) == sorted(layers["gpu"].unique())
    assert preds.groupby("gpu").size().to_dict() == layers.groupby("gpu").size().to_dict()
    assert np.isfinite(preds["predicted_ms"]).all() and (preds["predicted_ms"] > 0).all()


def test_model_beats_the_roofline_baselines_on_unseen_gpus(preds):
    metrics = le.summarize(preds)
    pooled = metrics["pooled_mape"]
    assert metrics["rows"] == len(preds) == 2800
    assert pooled["model"] < pooled["roofline"] and pooled["model"] < pooled["roofline_x_median_efficiency"]
    assert metrics["worst_gpu"] in preds["gpu"].unique()
    # the pooled value is the mean APE over every held-out row, not a mean of per-GPU values
    ape = (preds["predicted_ms"] - preds["measured_ms"]).abs() / preds["measured_ms"] * 100
    assert pooled["model"] == pytest.approx(ape.mean())


def test_training_part_never_holds_the_held_out_gpu(layers, cfg, monkeypatch):
    seen = []
    real = le.make_model

    def spy(params, seed):
        model = real(params, seed)
        fit = model.fit

        def checked_fit(X, y):
            seen.append(len(X))
            return fit(X, y)

        model.fit = checked_fit
        return model

    monkeypatch.setattr(le, "make_model", spy)
    le.leave_gpu_out(le.physics_frame(layers), cfg, progress=False)
    assert seen == [2100] * 4  # 3 of 4 GPUs x 700 rows in every training part


def test_bad_rows_are_refused_with_names(layers):
    broken = layers.copy()
    broken.iloc[3, broken.columns.get_loc("latency_ms")] = -1.0
    with pytest.raises(le.LayerDataError, match="non-positive latency"):
        le.physics_frame(broken)
    unknown = layers.head(5).assign(gpu="GeForce RTX 9999")
    with pytest.raises(UnknownGPUError, match="RTX 9999"):
        le.physics_frame(unknown)


def test_reports_are_written(preds, cfg, tmp_path):
    metrics = le.summarize(preds)
    paths = le.write_reports(preds, metrics, tmp_path, {**cfg, "sample_plot_rows": 500})
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    table = pd.read_csv(tmp_path / "per_gpu_mape.csv")
    assert set(table.columns) >= {"gpu", "rows", "model", "roofline", "roofline_x_median_efficiency"}
