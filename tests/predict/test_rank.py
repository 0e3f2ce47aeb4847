"""Ranking output: >= 20 GPUs known only by their specs, ordering, throughput, intervals, files; CLI errors."""

import json

import numpy as np
import pandas as pd
import pytest

from src.predict.__main__ import main
from src.predict.cnn import CnnSpecError, describe, from_explicit
from src.predict.gpus import select_gpus
from src.predict.model import load
from src.predict.rank import rank

DENSENET121 = ["--model", "densenet121", "--params-m", "7.98", "--gmacs", "2.87", "--activations-m", "6.9",
               "--img-size", "224"]


@pytest.fixture(scope="module")
def calibrated(holdout_model, real_overrides, tmp_path_factory):
    """The registered model with a calibration JSON (training part only, few folds for speed)."""
    from src.predict.calibrate import calibrate_model

    model = load(holdout_model["registered"])
    cal, _ = calibrate_model(model, levels=(0.9,), k=3, kinds=("row", "gpu", "cnn", "gpu_cnn"), max_rows=8000,
                             progress=False, overrides=real_overrides)
    path = tmp_path_factory.mktemp("cal") / "conformal.json"
    path.write_text(json.dumps(cal, default=float))
    return {"uri": holdout_model["registered"], "conformal": str(path), "cal": cal}


def test_rank_many_unseen_gpus(calibrated):
    model = load(calibrated["uri"], calibrated["conformal"])
    sel = select_gpus(["all"], model.meta["gpu_features"])
    cnn = from_explicit("densenet121", 7.98, 2.87, 6.9, 224)
    res = rank(model, cnn, sel, [1, 64], precision="amp_fp16", cnn_seen=False)
    t = res.table
    assert len(t) == 2 * len(sel.features) and len(sel.features) >= 20
    for b, part in t.groupby("batch_size"):
        assert part["rank"].tolist() == list(range(1, len(part) + 1))
        assert part["latency_ms"].is_monotonic_increasing
        assert np.allclose(part["throughput_per_s"], b / part["latency_ms"] * 1e3)
    assert (t["latency_lo_ms"] < t["latency_ms"]).all() and (t["latency_ms"] < t["latency_hi_ms"]).all()
    assert (~t["gpu_in_training"]).sum() >= 20  # most GPUs are known to the model only by their specs
    unseen = t[~t["gpu_in_training"]]
    assert set(unseen["interval_kind"]) == {"gpu_cnn"} and set(t[t["gpu_in_training"]]["interval_kind"]) == {"cnn"}
    # the served model's own verdict: a GPU it was not trained on (its list; the calibration's training part, which
    # picks the intervals, holds fewer) is an extrapolation, with the reason
    untrained = ~t["gpu"].isin(model.meta["training_gpus"])
    assert untrained.sum() >= 20 and not t.loc[untrained, "in_training_range"].any()
    assert t.loc[untrained, "extrapolation"].str.contains("GPU not in the training data").all()
    assert t.loc[~untrained, "in_training_range"].any()
    assert (t["in_training_range"] == (t["extrapolation"] == "")).all()
    assert set(t["bound"]) <= {"compute", "memory"} and (t["roofline_ms"] > 0).all()
    assert res.timings["n_gpus"] == len(sel.features) and res.timings["predict_seconds"] > 0


def test_rank_says_when_the_named_release_was_never_trained(calibrated):
    """The same answer a served request gets: a framework release no training row ran in this setup is flagged on
    every GPU, with the releases the model did train on."""
    model = load(calibrated["uri"], calibrated["conformal"])
    sel = select_gpus(["GeForce RTX 3090", "GeForce RTX 4090"], model.meta["gpu_features"])
    cnn = from_explicit("densenet121", 7.98, 2.87, 6.9, 224)
    res = rank(model, cnn, sel, [32], precision="amp_fp16", framework_version="9.9.9", cnn_seen=False)
    t = res.table
    assert not t["in_training_range"].any()
    assert t["extrapolation"].str.contains("framework_version '9.9.9' has no training rows in this setup (trained: [",
                                           regex=False).all()
    assert any("answers lie outside what the model was trained on" in n for n in res.notes)
    plain = rank(model, cnn, sel, [32], precision="amp_fp16", cnn_seen=False).table
    assert plain["in_training_range"].all() and (plain["extrapolation"] == "").all()
    assert np.allclose(plain["latency_ms"], rank(model, cnn, sel, [32], precision="amp_fp16").table["latency_ms"])


def test_cli_rank_writes_csv_and_plot(calibrated, tmp_path, capsys):
    rc = main(["--model-uri", calibrated["uri"], "--conformal", calibrated["conformal"], *DENSENET121,
               "--batch", "1", "32", "--gpus", "all", "--arch", "Ampere", "Ada Lovelace", "Hopper",
               "--out", str(tmp_path), "--stem", "r"])
    assert rc == 0
    t = pd.read_csv(tmp_path / "r.csv")
    assert t.groupby("batch_size").size().min() >= 20
    assert set(t["architecture"]) <= {"Ampere", "Ada Lovelace", "Hopper"}
    assert (tmp_path / "r.png").stat().st_size > 10_000
    meta = json.loads((tmp_path / "r.json").read_text())
    assert meta["timings"]["n_gpus"] >= 20 and meta["cnn"]["route"] == "explicit"
    out = capsys.readouterr().out
    assert "Timings: feature extraction" in out and "per GPU" in out


def test_cli_unknown_gpu_names_closest(calibrated, tmp_path, capsys):
    rc = main(["--model-uri", calibrated["uri"], *DENSENET121, "--gpus", "RTX 4090", "--out", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'RTX 4090'" in err and "GeForce RTX 4090" in err


def test_cli_bad_precision_names_field(calibrated, tmp_path, capsys):
    rc = main(["--model-uri", calibrated["uri"], *DENSENET121, "--gpus", "GeForce RTX 3090", "--precision",
               "int4", "--out", str(tmp_path)])
    assert rc == 2
    assert "field 'precision'" in capsys.readouterr().err


def test_cli_unknown_model_uri(tmp_path, capsys, holdout_model):
    rc = main(["--model-uri", "models:/no-such-model@champion", *DENSENET121, "--out", str(tmp_path)])
    assert rc == 2
    assert "cannot load model 'models:/no-such-model@champion'" in capsys.readouterr().err


def test_cnn_routes_are_exclusive_and_checked():
    with pytest.raises(CnnSpecError, match="one way"):
        describe("keras", "DenseNet121", "x.onnx", None, None, None, None)
    with pytest.raises(CnnSpecError, match="need all of"):
        describe(None, None, None, 7.98, 2.87, None, 224)
    with pytest.raises(CnnSpecError, match="gmacs=-1"):
        from_explicit("x", 7.98, -1, 6.9, 224)
    with pytest.raises(CnnSpecError, match="not found"):
        describe(None, None, "/nonexistent/model.onnx", None, None, None, None)


def test_cli_rank_for_a_runtime(calibrated, tmp_path, capsys):
    """`--runtime tensorrt` reaches the model (it prices fused kernels) and names the files, CSV and JSON."""
    args = ["--model-uri", calibrated["uri"], "--conformal", calibrated["conformal"], *DENSENET121, "--batch", "1",
            "--gpus", "GeForce RTX 3090", "Tesla V100 PCIe 16 GB", "A100 PCIe 40 GB", "--precision", "fp16",
            "--out", str(tmp_path)]
    assert main([*args, "--runtime", "tensorrt"]) == 0 and main([*args, "--compile", "eager"]) == 0
    trt = pd.read_csv(tmp_path / "ranking_densenet121_tensorrt_fp16_inference.csv")
    eager = pd.read_csv(tmp_path / "ranking_densenet121_eager_fp16_inference.csv")
    assert set(trt["runtime"]) == {"tensorrt"} and set(eager["runtime"]) == {"eager"}
    assert set(trt["precision"]) == {"fp16"} and len(trt) == len(eager) == 3
    both = trt.merge(eager, on="gpu", suffixes=("_trt", "_eager"))
    assert not np.allclose(both["latency_ms_trt"], both["latency_ms_eager"])
    meta = json.loads((tmp_path / "ranking_densenet121_tensorrt_fp16_inference.json").read_text())
    assert meta["runtime"] == "tensorrt"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([*args, "--runtime", "onnx"])
    assert exc.value.code == 2 and "invalid choice: 'onnx'" in capsys.readouterr().err
