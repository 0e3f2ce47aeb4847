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
    assert set(unseen["interval_kind"]) == {"gpu_cnn"}
    # a training GPU keeps the unseen CNN's interval, unless the setup never ran on a GPU like it (then the widest)
    seen = t[t["gpu_in_training"]]
    other_class = seen["extrapolation"].str.contains("ran in training only on GPUs with", regex=False)
    assert set(seen.loc[~other_class, "interval_kind"]) == {"cnn"}
    assert set(seen.loc[other_class, "interval_kind"]) <= {"setup"}
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


def test_rank_says_which_answers_need_more_memory_than_the_gpu_has(calibrated):
    model = load(calibrated["uri"], calibrated["conformal"])
    sel = select_gpus(["GeForce GTX 1050", "A100 SXM4 80 GB"], model.meta["gpu_features"])
    cnn = from_explicit("densenet121", 7.98, 2.87, 6.9, 224)
    res = rank(model, cnn, sel, [1, 1024], precision="amp_fp16", mode="training", cnn_seen=False)
    t = res.table.set_index(["gpu", "batch_size"])
    assert t.loc[("GeForce GTX 1050", 1024), "memory_needed_gb"] > t.loc[("GeForce GTX 1050", 1024), "gpu_memory_gb"]
    assert not t.loc[("GeForce GTX 1050", 1024), "fits_in_memory"]
    assert t.loc[("A100 SXM4 80 GB", 1), "fits_in_memory"] and t.loc[("GeForce GTX 1050", 1), "fits_in_memory"]
    assert any(n.startswith("1 of 4 answers need more memory than the GPU has (1 GPU(s))") for n in res.notes)


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
    # another framework with the same runtime and precision writes its own files, never over the default's
    assert main([*args, "--runtime", "tensorrt", "--framework", "tensorrt"]) == 0
    own = pd.read_csv(tmp_path / "ranking_densenet121_tensorrt_tensorrt_fp16_inference.csv")
    assert len(own) == 3 and pd.read_csv(tmp_path / "ranking_densenet121_tensorrt_fp16_inference.csv").equals(trt)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([*args, "--runtime", "onnx"])
    assert exc.value.code == 2 and "invalid choice: 'onnx'" in capsys.readouterr().err


def _tiny_onnx(path):
    """A small CNN no source measured, exported to ONNX by torch as a user would (dynamic batch axis)."""
    torch = pytest.importorskip("torch", reason="torch is not installed (profiling / zoo-ci extra)")
    pytest.importorskip("onnx", reason="onnx is not installed (zoo / zoo-ci extra)")
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1),
                        nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)).eval()
    torch.onnx.export(net, torch.randn(1, 3, 224, 224), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["output"], dynamic_axes={"input": {0: "batch"}})
    return path


def test_an_onnx_cnn_nobody_measured_is_priced_layer_by_layer(calibrated, tmp_path, capsys):
    """`--onnx FILE`: the CNN's per-layer table becomes a kernel profile in the loaded model, so it is priced kernel
    by kernel (not from its whole-network numbers); the same numbers given by hand are priced by them and differ."""
    from src.features.baseline import perf_step
    from src.predict.profiles import attach_layer_profile

    path = _tiny_onnx(tmp_path / "tiny.onnx")
    gpus = ["GeForce RTX 3090", "Tesla T4", "H100 PCIe 80 GB"]
    args = ["--model-uri", calibrated["uri"], "--conformal", calibrated["conformal"], "--batch", "1", "64",
            "--gpus", *gpus, "--out", str(tmp_path)]
    assert main([*args, "--onnx", str(path), "--stem", "onnx"]) == 0
    out = capsys.readouterr().out
    assert "layer profile (added)" in out and "priced layer by layer from its 9 kernels" in out
    meta = json.loads((tmp_path / "onnx.json").read_text())
    assert meta["layer_profile"]["status"] == "added" and meta["layer_profile"]["kernels"] == 9
    cnn = meta["cnn"]
    numbers = ["--params-m", str(cnn["param_count_m"]), "--gmacs", str(cnn["gmacs"]), "--activations-m",
               str(cnn["activations_m"]), "--img-size", "224"]
    assert main([*args, "--model", "tiny", *numbers, "--stem", "numbers"]) == 0
    assert "layer profile (by_numbers)" in capsys.readouterr().out
    by_layers, by_numbers = pd.read_csv(tmp_path / "onnx.csv"), pd.read_csv(tmp_path / "numbers.csv")
    both = by_layers.merge(by_numbers, on=["gpu", "batch_size"], suffixes=("_layers", "_numbers"))
    assert len(both) == 6 and (both["latency_ms_layers"] > 0).all()
    assert not np.allclose(both["latency_ms_layers"], both["latency_ms_numbers"], rtol=1e-3)
    # in this process: the profile is in the model's index for inference; a training step of an ONNX file is not
    model = load(calibrated["uri"])
    feats = describe(None, None, str(path), None, None, None, None)
    assert attach_layer_profile(model.pipeline, feats, "training").status == "by_numbers"
    outcome = attach_layer_profile(model.pipeline, feats, "inference")
    assert outcome.status == "added" and "9 kernels" in outcome.note
    index = perf_step(model.pipeline.regressor_).physics
    assert index.has(feats.name, 224, "inference") and not index.has(feats.name, 224, "training")
    assert attach_layer_profile(model.pipeline, feats, "inference").status == "known"
