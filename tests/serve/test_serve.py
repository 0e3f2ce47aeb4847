"""`mlflow models serve` on 127.0.0.1: valid and malformed requests; the server keeps serving. The request check
itself is tested in tests/features/test_request.py, the load and fault test is tests/serve/test_load.py."""

import math

import pytest
import requests

from tests.features.test_request import VALID


def post(url, records):
    return requests.post(f"{url}/invocations", json={"dataframe_records": records}, timeout=60)


def test_serve_valid_then_malformed_then_valid(server):
    r = post(server, [VALID, {**VALID, "gpu": "GeForce RTX 3090", "precision": "fp32", "mode": "training"}])
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert len(preds) == 2 and all(p["latency_ms"] > 0 for p in preds)
    # no calibration in this model's folder yet (the calibrate stage adds it): said, and NaN bounds
    assert all(p["interval_kind"] == "uncalibrated" and math.isnan(p["latency_ms_hi_90"]) for p in preds), preds

    missing = {k: v for k, v in VALID.items() if k != "gmacs"}
    r = post(server, [missing])
    assert r.status_code == 400 and r.json()["message"].startswith("missing field(s) ['gmacs']")

    r = post(server, [{**VALID, "gmacs": None}])
    assert r.status_code == 400 and r.json()["message"].startswith("field 'gmacs' row 0: value is NaN")

    r = post(server, [{**VALID, "batch_size": -8}])
    assert r.status_code == 400
    assert r.json()["message"].startswith("field 'batch_size' row 0: -8 is outside the valid range [1, 65536]")

    r = post(server, [{**VALID, "gpu": "RTX 9999"}])
    assert r.status_code == 400 and "unknown GPU 'RTX 9999'" in r.json()["message"]

    r = post(server, [{**VALID, "img_size": "big"}])
    assert r.status_code == 400 and r.json()["message"].startswith("field 'img_size' row 0: 'big' is not a number")

    r = post(server, [{**VALID, "colour": "red"}])
    assert r.status_code == 400 and r.json()["message"].startswith("unknown field(s) ['colour']")

    r = post(server, [VALID])
    assert r.status_code == 200 and r.json()["predictions"][0]["latency_ms"] == pytest.approx(preds[0]["latency_ms"])


def test_serve_answers_any_gpu_and_marks_extrapolation(server):
    """A GPU nobody measured (the tiny table has four) is answered, flagged, with the reason; so is a batch size
    beyond the training range, a CNN without PTX counts (the default feature set looks them up by name, and
    imputes an unnamed CNN's from its GMACs) and a framework release no training row ran. In-range rows say so."""
    resnet = {**VALID, "model_key": "resnet50"}
    r = post(server, [resnet, {**resnet, "gpu": "H100 SXM5 80 GB"}, {**resnet, "batch_size": 4096}, VALID,
                      {**resnet, "model_key": "my_new_cnn"}, {**resnet, "framework_version": "2.11.0"}])
    assert r.status_code == 200, r.text
    known, h100, huge, unnamed, new, release = r.json()["predictions"]
    # a framework release no training row ran in this setup (the tiny table ran PyTorch 2.4.0 only)
    assert release["in_training_range"] is False and release["extrapolation"] == (
        "framework_version '2.11.0' has no training rows in this setup (trained: ['2.4.0'])")
    assert known["in_training_range"] is True and known["extrapolation"] == ""
    assert h100["in_training_range"] is False and "GPU not in the training data" in h100["extrapolation"]
    assert "memory_bandwidth_gbs" in h100["extrapolation"]  # faster memory than any measured GPU
    assert h100["latency_ms"] > 0
    assert huge["in_training_range"] is False and "batch_size 4096 outside the training range" in huge["extrapolation"]
    assert unnamed["extrapolation"] == "no PTX counts for CNN 'unknown' at 224 px: imputed from its GMACs"
    assert new["in_training_range"] is False and "CNN 'my_new_cnn'" in new["extrapolation"]
    assert unnamed["latency_ms"] > 0 and new["latency_ms"] > 0


def test_serve_answers_a_runtime_no_training_row_ran(server):
    """The tiny table ran eager only: a TensorRT request is priced by the physics estimate's fused kernels times the
    fallback efficiency, and flagged; a runtime outside the measurement schema is refused, naming the runtimes."""
    resnet = {**VALID, "model_key": "resnet50", "batch_size": 1}
    r = post(server, [resnet, {**resnet, "compile_mode": "tensorrt"}, {**resnet, "compile_mode": "xla_tensorrt"}])
    assert r.status_code == 200, r.text
    eager, trt, tftrt = r.json()["predictions"]
    assert eager["in_training_range"] is True
    for answer, name in ((trt, "tensorrt"), (tftrt, "xla_tensorrt")):
        assert answer["in_training_range"] is False and answer["extrapolation"].startswith(
            f"compile_mode '{name}' has no training rows of its kind: bare physics estimate")
    # batch 1: an eager run launches one kernel per operator, TensorRT one per fused block from a graph
    assert trt["latency_ms"] < eager["latency_ms"]
    r = post(server, [{**resnet, "compile_mode": "onnx"}])
    assert r.status_code == 400 and r.json()["message"].startswith("field 'compile_mode' row 0: 'onnx' is not one of")
    assert "'xla_tensorrt'" in r.json()["message"]


def test_serve_says_when_the_step_cannot_fit_in_gpu_memory(server):
    """VGG-16 training at batch 4096 in fp32 needs ~220 GB: answered, with fits_in_memory false and the estimate."""
    vgg = {**VALID, "param_count_m": 138.36, "gmacs": 15.47, "activations_m": 13.56, "batch_size": 4096,
           "precision": "fp32", "mode": "training", "gpu": "GeForce RTX 3090"}
    r = post(server, [vgg, VALID])
    assert r.status_code == 200, r.text
    big, small = r.json()["predictions"]
    assert big["fits_in_memory"] is False and big["latency_ms"] > 0
    assert big["memory_needed_gb"] > 200 and big["gpu_memory_gb"] == 24.0
    assert small["fits_in_memory"] is True and small["memory_needed_gb"] < 1.0
