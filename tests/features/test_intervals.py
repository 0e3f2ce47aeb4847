"""The served answer's conformal interval: the novelty kind of each request row and its bounds, and reading the
calibration file the `calibrate` stage puts into the model's folder."""

import json
import math

import numpy as np
import pytest

from src.features.intervals import (
    UNCALIBRATED,
    bound_columns,
    cnn_key,
    cnn_keys,
    interval_columns,
    novelty,
    novelty_kinds,
    pick_q,
)
from src.features.served import read_calibration

CAL = {"levels": [0.8, 0.9], "train_gpus": ["GeForce RTX 4090", "A100 SXM4 80 GB"],
       "train_model_keys": ["resnet50", "efficientnet_b0"],
       "quantiles": {"row": {"0.80": 0.1, "0.90": 0.2}, "gpu": {"0.80": 0.3, "0.90": 0.5},
                     "cnn": {"0.80": 0.25, "0.90": math.inf}, "gpu_cnn": {"0.80": 0.4, "0.90": 0.7}}}


def test_each_row_gets_the_quantile_of_its_novelty():
    pred = np.array([10.0, 10.0, 4.0, 2.0])
    gpus = np.array(["GeForce RTX 4090", "H200 SXM 141 GB", "A100 SXM4 80 GB", "L4"], dtype=object)
    keys = np.array(["ResNet50", "resnet50", "my_cnn", "efficientnet-b0x"], dtype=object)
    out = interval_columns(CAL, "latency_ms", pred, gpus, keys)
    # case and '-' vs '_' do not make a CNN new; an unknown GPU or CNN does
    assert out["interval_kind"].tolist() == ["row", "gpu", "cnn", "gpu_cnn"]
    assert np.allclose(out["latency_ms_lo_80"], pred * np.exp(-np.array([0.1, 0.3, 0.25, 0.4])))
    assert np.allclose(out["latency_ms_hi_80"], pred * np.exp([0.1, 0.3, 0.25, 0.4]))
    # an infinite quantile (too few scores for a finite guarantee) answers the widest finite one, as src.predict does
    assert pick_q(CAL, "cnn", 0.9) == 0.7
    assert np.allclose(out["latency_ms_hi_90"], pred * np.exp([0.2, 0.5, 0.7, 0.7]))
    assert (out["latency_ms_lo_90"] < pred).all() and (out["latency_ms_hi_90"] > pred).all()


def test_a_request_naming_no_cnn_counts_as_a_new_cnn():
    out = interval_columns(CAL, "latency_ms", np.array([1.0]), np.array(["GeForce RTX 4090"]), None)
    assert out["interval_kind"].tolist() == ["cnn"]


def test_no_calibration_or_a_missing_level_leaves_nan_bounds():
    out = interval_columns(None, "latency_ms", np.array([1.0, 2.0]), np.array(["L4", "L4"]), None)
    assert out["interval_kind"].tolist() == [UNCALIBRATED] * 2
    assert list(out)[1:] == bound_columns("latency_ms") == ["latency_ms_lo_80", "latency_ms_hi_80",
                                                             "latency_ms_lo_90", "latency_ms_hi_90"]
    assert all(np.isnan(out[c]).all() for c in bound_columns("latency_ms"))
    only_90 = {**CAL, "levels": [0.9], "quantiles": {k: {"0.90": v["0.90"]} for k, v in CAL["quantiles"].items()}}
    out = interval_columns(only_90, "latency_ms", np.array([1.0]), np.array(["L4"]), np.array(["resnet50"]))
    assert np.isnan(out["latency_ms_lo_80"]).all() and out["latency_ms_hi_90"][0] == pytest.approx(math.exp(0.5))


def test_read_calibration_absent_valid_and_malformed(tmp_path):
    assert read_calibration(tmp_path) is None
    (tmp_path / "conformal.json").write_text(json.dumps(CAL))
    assert read_calibration(tmp_path)["quantiles"]["row"]["0.90"] == 0.2
    (tmp_path / "conformal.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"conformal\.json: not valid JSON \(line 1, column 2: "):
        read_calibration(tmp_path)
    (tmp_path / "conformal.json").write_text(json.dumps({"k": 2}))
    with pytest.raises(ValueError, match=r"conformal\.json is not a calibration \(missing keys \['quantiles'\]"):
        read_calibration(tmp_path)


def test_array_forms_agree_with_the_scalar_rules():
    names = ["ResNet-50", "efficientnet_b0", "ViT-B-16", "x"]
    assert cnn_keys(np.array(names, dtype=object)).tolist() == [cnn_key(n) for n in names]
    gpu, cnn = np.array([True, True, False, False]), np.array([True, False, True, False])
    assert novelty_kinds(gpu, cnn).tolist() == [novelty(g, c) for g, c in zip(gpu, cnn, strict=True)]


ESC_CAL = {**CAL, "quantiles": {**CAL["quantiles"], "arch": {"0.80": 0.35, "0.90": 0.6},
                                "runtime": {"0.80": 0.9, "0.90": 1.2}}}


def test_a_new_gpu_generation_or_runtime_widens_the_interval_only_where_wider():
    from src.features.intervals import row_quantiles

    pred = np.ones(5)
    gpus = np.array(["GeForce RTX 4090", "B300", "B300", "GeForce RTX 4090", "L4"], dtype=object)
    keys = np.array(["resnet50", "resnet50", "my_cnn", "resnet50", "my_cnn"], dtype=object)
    escalate = {"arch": np.array([False, True, True, False, False]),
                "runtime": np.array([False, False, False, True, True])}
    out = interval_columns(ESC_CAL, "latency_ms", pred, gpus, keys, escalate)
    # the new-generation GPU (specs beyond the training range) takes the arch quantile where it is wider than its
    # novelty's (gpu 0.3 < arch 0.35; gpu_cnn 0.4 > arch 0.35 at 80 % but 0.7 > 0.6 at 90 %: it keeps gpu_cnn)
    assert out["interval_kind"].tolist() == ["row", "arch", "gpu_cnn", "runtime", "runtime"]
    assert np.allclose(np.log(out["latency_ms_hi_80"]), [0.1, 0.35, 0.4, 0.9, 0.9])
    assert np.allclose(np.log(out["latency_ms_hi_90"]), [0.2, 0.6, 0.7, 1.2, 1.2])
    # without escalations: the novelty alone, as before
    q, used = row_quantiles(ESC_CAL, np.array(["row", "gpu"], dtype=object), 0.9)
    assert q.tolist() == [0.2, 0.5] and used.tolist() == ["row", "gpu"]
    with pytest.raises(ValueError, match="unknown interval escalation 'batch'"):
        row_quantiles(ESC_CAL, np.array(["row"], dtype=object), 0.9, {"batch": np.array([True])})


def test_a_setup_nobody_ran_takes_the_setup_quantile_where_wider():
    cal = {**ESC_CAL, "quantiles": {**ESC_CAL["quantiles"], "setup": {"0.80": 0.45, "0.90": 0.65}}}
    gpus = np.array(["GeForce RTX 4090", "L4", "L4", "GeForce RTX 4090"], dtype=object)
    keys = np.array(["resnet50", "resnet50", "my_cnn", "resnet50"], dtype=object)
    escalate = {"setup": np.array([True, True, True, False]), "runtime": np.array([False, False, False, True])}
    out = interval_columns(cal, "latency_ms", np.ones(4), gpus, keys, escalate)
    # row 0.2 and gpu 0.5 < setup 0.65 at 90 %; gpu_cnn 0.7 > 0.65 keeps its own; a new runtime 1.2 is wider still
    assert out["interval_kind"].tolist() == ["setup", "setup", "gpu_cnn", "runtime"]
    assert np.allclose(np.log(out["latency_ms_hi_90"]), [0.65, 0.65, 0.7, 1.2])
    assert np.allclose(np.log(out["latency_ms_hi_80"]), [0.45, 0.45, 0.45, 0.9])


def test_a_calibration_from_before_the_escalations_answers_its_widest_kind():
    # CAL has no arch or runtime quantile: an escalated row gets the widest calibrated kind (gpu_cnn), named as the
    # escalation it is
    out = interval_columns(CAL, "latency_ms", np.ones(2), np.array(["GeForce RTX 4090"] * 2, dtype=object),
                           np.array(["resnet50"] * 2, dtype=object), {"runtime": np.array([True, False])})
    assert out["interval_kind"].tolist() == ["runtime", "row"]
    assert np.allclose(np.log(out["latency_ms_hi_90"]), [0.7, 0.2])


def test_a_known_name_with_contradicting_numbers_counts_as_an_unseen_cnn():
    gpus = np.array(["GeForce RTX 4090", "GeForce RTX 4090", "L4", "L4"], dtype=object)
    keys = np.array(["resnet50", "resnet50", "resnet50", "my_cnn"], dtype=object)
    out = interval_columns(CAL, "latency_ms", np.ones(4), gpus, keys,
                           cnn_unseen=np.array([False, True, True, True]))
    assert out["interval_kind"].tolist() == ["row", "cnn", "gpu_cnn", "gpu_cnn"]
    assert np.allclose(np.log(out["latency_ms_hi_80"]), [0.1, 0.25, 0.4, 0.4])
