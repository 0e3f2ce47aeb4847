"""`calibrate` puts the calibration into the registered model's own folder, so a real `mlflow models serve` of it
answers with the intervals `python -m src.predict` gives (before: the HTTP answer had none)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import requests

from tests.serve.server import start, stop

# asked for a CNN of the training part on a GPU of it, on a GPU nobody measured, and for a CNN it never saw
ROW = {"param_count_m": 25.56, "gmacs": 4.11, "activations_m": 11.11, "batch_size": 32,
       "img_size": 224, "precision": "amp_fp16", "mode": "inference"}


def test_calibrated_model_serves_intervals_over_http(holdout_model, real_overrides, tmp_path, capsys,
                                                     monkeypatch):
    from src.features.served import known_cnns, predict_frame
    from src.predict.__main__ import main
    from src.predict.model import load

    monkeypatch.setenv("MLFLOW_TRACKING_URI", holdout_model["tracking_uri"])
    uri = holdout_model["registered"]
    # K = 3 (test_calibrate's calibrations use K = 2, so neither reuses the other's, whatever the order)
    args = ["calibrate", "--model-uri", uri, "--k", "3", "--jobs", "2", "--levels", "0.8", "0.9", "--kinds", "row",
            "--max-rows", "8000", "--reuse", "--out", str(tmp_path), *real_overrides]
    assert main(args) == 0
    assert "added to the served model" in capsys.readouterr().out
    model = load(uri)
    assert model.served_conformal == model.conformal and model.model_id
    assert main(args) == 0  # the folder already holds it: nothing is written again
    assert "kept it" in (out := capsys.readouterr().out) and "added to the served model" not in out

    gpu, cnn = model.conformal["train_gpus"][0], model.conformal["train_model_keys"][0]
    unmeasured = sorted(set(model.gpus["gpu"]) - set(model.conformal["train_gpus"]))[0]
    # a known CNN is sent with its own GMACs (other numbers contradicting it are refused: test_served.py)
    own = {**ROW, "gmacs": known_cnns(model.pipeline).gmacs(cnn, ROW["img_size"]) or ROW["gmacs"]}
    rows = [{**own, "gpu": gpu, "model_key": cnn}, {**own, "gpu": unmeasured, "model_key": cnn},
            {**ROW, "gpu": gpu, "model_key": "my_cnn"}]
    proc, url = start(uri, holdout_model["tracking_uri"], tmp_path / "server.log", workers=1)
    try:
        r = requests.post(f"{url}/invocations", json={"dataframe_records": rows}, timeout=60)
    finally:
        stop(proc)
    assert r.status_code == 200, r.text
    served = pd.DataFrame(r.json()["predictions"])
    # only "row" was calibrated: the other kinds answer the widest calibrated quantile (here the row's)
    assert served["interval_kind"].tolist() == ["row", "gpu", "cnn"]
    q90 = model.conformal["quantiles"]["row"]["0.90"]
    assert np.allclose(served["latency_ms_hi_90"], served["latency_ms"] * np.exp(q90))
    assert (served["latency_ms_lo_80"] > served["latency_ms_lo_90"]).all()
    assert (served["latency_ms_hi_80"] < served["latency_ms_hi_90"]).all()
    # the same answer as the in-process path `python -m src.predict` ranks with
    local = predict_frame(model.pipeline, model.gpus, model.meta, pd.DataFrame(rows), conformal=model.conformal)
    for col in ("latency_ms", "latency_ms_lo_80", "latency_ms_hi_80", "latency_ms_lo_90", "latency_ms_hi_90"):
        assert served[col].to_numpy() == pytest.approx(local[col].to_numpy(), rel=1e-9)


def test_a_model_folder_away_from_its_run_keeps_its_calibration(holdout_model, real_overrides, tmp_path,
                                                                 monkeypatch):
    """`python -m src.predict --model-uri <folder>` on a copy of a calibrated model, with a tracking store that
    lacks its run: the intervals come from the folder's own calibration."""
    import mlflow

    from src.predict.__main__ import main
    from src.predict.model import load

    monkeypatch.setenv("MLFLOW_TRACKING_URI", holdout_model["tracking_uri"])
    mlflow.set_tracking_uri(holdout_model["tracking_uri"])
    uri = holdout_model["registered"]
    assert main(["calibrate", "--model-uri", uri, "--k", "3", "--jobs", "2", "--levels", "0.8", "0.9", "--kinds",
                 "row", "--max-rows", "8000", "--reuse", "--out", str(tmp_path), *real_overrides]) == 0
    expected = load(uri).served_conformal
    folder = mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "copy"))
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        copy = load(folder)
    finally:
        mlflow.set_tracking_uri(holdout_model["tracking_uri"])
    assert expected and copy.conformal == expected and copy.served_conformal == expected
