"""Request checking, answers and `mlflow models serve` on 127.0.0.1: valid and malformed requests; the server keeps
serving. The load and fault test is tests/serve/test_load.py."""

import numpy as np
import pandas as pd
import pytest
import requests
from mlflow.exceptions import MlflowException

from src.features.served import (
    VALID_RANGES,
    RequestError,
    extrapolation_reasons,
    request_schema,
    setting_reasons,
    training_settings,
    validate_request,
    working_set_gb,
)

VALID = {"gpu": "GeForce RTX 4090", "param_count_m": 25.56, "gmacs": 4.11, "activations_m": 11.11,
         "batch_size": 32, "img_size": 224, "precision": "amp_fp16", "mode": "inference"}
META = {"numeric_inputs": ["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
        "categorical_inputs": ["precision", "mode", "memory_layout", "compile_mode", "family"], "ptx_features": [],
        "open_categorical": ["family"], "input_columns": [],
        "categories": {"precision": ["amp_fp16", "fp32"], "mode": ["inference", "training"],
                       "memory_layout": ["nchw"], "compile_mode": ["eager"]}}
GPUS = ["GeForce RTX 4090", "GeForce RTX 3090"]


@pytest.mark.parametrize("change,message", [
    ({"gmacs": float("nan")}, "field 'gmacs' row 0: value is NaN"),
    ({"gmacs": float("inf")}, "field 'gmacs' row 0: value is NaN/missing/infinite"),
    ({"batch_size": -4}, "field 'batch_size' row 0: -4 is outside the valid range [1, 65536]"),
    ({"batch_size": 1e12}, "field 'batch_size' row 0: 1e+12 is outside the valid range [1, 65536] (samples per"),
    ({"img_size": 4}, "field 'img_size' row 0: 4 is outside the valid range [8, 4096]"),
    ({"param_count_m": 0.0}, "field 'param_count_m' row 0: 0 is outside the valid range [0.0001, 100000]"),
    ({"batch_size": 2.5}, "field 'batch_size' row 0: 2.5 is not a whole number"),
    ({"gpu": "RTX 4090"}, "unknown GPU 'RTX 4090'; closest known: ['GeForce RTX 4090'"),
    ({"gpu": 7}, "field 'gpu' row 0: a GPU name (string) is required, got 7"),
    ({"precision": "int8"}, "field 'precision' row 0: 'int8' is not one of ['amp_fp16', 'fp32']"),
    ({"precision": None}, "field 'precision' row 0: value is missing; one of ['amp_fp16', 'fp32']"),
    ({"gmacs": "many"}, "field 'gmacs' row 0: 'many' is not a number"),
    ({"gmacs": True}, "field 'gmacs' row 0: True is not a number"),
    ({"batchsize": 32}, "unknown field(s) ['batchsize'] ('batchsize': did you mean 'batch_size'?)"),
])
def test_request_messages_lead_with_field_value_and_range(change, message):
    with pytest.raises(MlflowException) as err:
        validate_request(pd.DataFrame([{**VALID, **change}]), META, GPUS)
    assert message in err.value.message and err.value.message.startswith(("field ", "unknown field"))
    assert err.value.get_http_status_code() == 400


def test_error_row_is_the_first_bad_one_and_missing_fields_are_named():
    rows = pd.DataFrame([VALID, VALID, {**VALID, "batch_size": 0}])
    with pytest.raises(RequestError, match="field 'batch_size' row 2: 0 is outside"):
        validate_request(rows, META, GPUS)
    with pytest.raises(RequestError, match=r"missing field\(s\) \['gmacs'\]"):
        validate_request(pd.DataFrame([{k: v for k, v in VALID.items() if k != "gmacs"}]), META, GPUS)
    with pytest.raises(RequestError, match="empty request"):
        validate_request(pd.DataFrame(), META, GPUS)


def test_validate_request_defaults_and_case():
    out = validate_request(pd.DataFrame([{**VALID, "gpu": "geforce rtx 4090", "compile_mode": None}]), META, GPUS)
    assert out.loc[0, "gpu"] == "GeForce RTX 4090" and out.loc[0, "memory_layout"] == "nchw"
    assert out.loc[0, "compile_mode"] == "eager" and out.loc[0, "family"] == "unknown"
    # numbers sent as text are read as numbers; a field another model uses (model_key) is accepted
    out = validate_request(pd.DataFrame([{**VALID, "batch_size": "64", "model_key": "resnet50"}]), META, GPUS)
    assert out.loc[0, "batch_size"] == 64.0


def test_message_survives_the_scoring_servers_rewrite():
    """MLflow's server sets e.message = "Failed to predict data '<frame>'. Error: <message>": ours stays first."""
    err = RequestError("field 'gmacs' row 0: value is NaN")
    err.message = f"Failed to predict data '{pd.DataFrame([VALID])}'. \nError: {err.message}"
    assert err.message == "field 'gmacs' row 0: value is NaN"
    assert err.serialize_as_json().startswith('{"error_code": "INVALID_PARAMETER_VALUE", "message": "field')


def test_working_set_by_hand():
    """ResNet-50 (25.56 M parameters, 11.11 M activations per sample), batch 256."""
    cols = {"param_count_m": np.array([25.56, 25.56, 25.56]), "activations_m": np.array([11.11] * 3),
            "batch_size": np.array([256.0] * 3), "precision": np.array(["fp32", "amp_fp16", "fp32"], dtype=object),
            "mode": np.array(["training", "training", "inference"], dtype=object)}
    got = working_set_gb(cols) * 2**30
    p, a = 25.56e6, 11.11e6 * 256
    assert got[0] == pytest.approx(p * 4 + p * (4 + 8) + a * 4)  # weights, gradients, Adam state, activations
    assert got[1] == pytest.approx(p * 2 + p * (2 + 8 + 4) + a * 2)  # + fp32 master weights under AMP
    assert got[2] == pytest.approx(p * 4 + 0.05 * a * 4)  # inference: the live layers only


def test_no_measured_row_is_flagged_out_of_memory():
    """The estimate is a lower bound: every configuration somebody measured fits (real table when present)."""
    from tests.serve.realdata import PROCESSED

    if not (PROCESSED / "dataset.parquet").exists():
        pytest.skip("data/processed/dataset.parquet not built (DVC stage features)")
    df = pd.read_parquet(PROCESSED / "dataset.parquet")
    cols = {c: df[c].to_numpy() for c in ["param_count_m", "activations_m", "batch_size"]}
    cols.update({c: df[c].to_numpy(dtype=object) for c in ["precision", "mode"]})
    share = working_set_gb(cols) / df["memory_size_gb"].to_numpy()
    assert share.max() <= 1.0
    assert share.max() > 0.5  # and not vacuous: the largest measured configurations use most of their GPU


def test_extrapolation_reasons_per_row():
    meta = {"training_gpus": ["A"], "training_ranges": {"batch_size": [1, 128], "bw": [100.0, 1000.0]}}
    joined = {"gpu": np.array(["A", "B", "A", "B"], dtype=object), "batch_size": np.array([8, 8, 4096, 4096.0]),
              "bw": np.array([500.0, 2000.0, 500.0, 500.0])}
    got = extrapolation_reasons(joined, meta).tolist()
    assert got == ["", "GPU not in the training data; bw 2000 outside the training range [100, 1000]",
                   "batch_size 4096 outside the training range [1, 128]",
                   "GPU not in the training data; batch_size 4096 outside the training range [1, 128]"]
    joined["compile_mode"] = np.array(["eager", "eager", "tensorrt", "eager"], dtype=object)
    got = extrapolation_reasons(joined, meta, unseen={"compile_mode": np.array([False, False, True, False])})
    assert got[2] == ("batch_size 4096 outside the training range [1, 128]; compile_mode 'tensorrt' has no "
                      "training rows of its kind: bare physics estimate x median training efficiency")


def test_setting_reasons_flag_a_setup_or_named_release_no_training_row_had():
    trained = pd.DataFrame({"framework": ["pytorch", "pytorch", "pytorch", "tensorflow"],
                            "precision": ["amp_fp16", "amp_fp16", "fp32", "fp32"],
                            "mode": ["inference", "inference", "training", "inference"],
                            "memory_layout": ["nchw"] * 4, "compile_mode": ["eager", "eager", "eager", "xla"],
                            "framework_version": ["2.4.0", "2.9.1", "unknown", "1.15"], "gpu": ["A"] * 4})
    settings = training_settings(pd.concat([trained, trained]))  # duplicates collapse
    assert len(settings) == 4 and settings[0] == ["pytorch", "amp_fp16", "inference", "nchw", "eager", "2.4.0"]
    joined = {"framework": np.array(["pytorch", "pytorch", "pytorch", "pytorch", "tensorflow"], dtype=object),
              "precision": np.array(["amp_fp16", "amp_fp16", "amp_fp16", "amp_fp16", "fp32"], dtype=object),
              "mode": np.array(["inference", "inference", "inference", "training", "inference"], dtype=object),
              "memory_layout": np.array(["nchw"] * 5, dtype=object),
              "compile_mode": np.array(["eager", "eager", "eager", "eager", "xla"], dtype=object),
              "framework_version": np.array(["2.9.1", "unknown", "2.11.0", "2.4.0", "1.15"], dtype=object),
              "gpu": np.array(["A"] * 5, dtype=object)}
    got = setting_reasons(joined, settings).tolist()
    assert got == ["", "",  # a trained setting; a trained setup whose release the request does not name
                   "framework_version '2.11.0' has no training rows in this setup (trained: ['2.4.0', '2.9.1'])",
                   "no training row ran this setup (framework pytorch, precision amp_fp16, mode training, "
                   "memory_layout nchw, compile_mode eager)", ""]
    # and it is one of the reasons of the served answer (a model without the list flags nothing)
    reasons = extrapolation_reasons(joined, {"training_gpus": ["A"], "training_settings": settings})
    assert (reasons != "").tolist() == [False, False, True, True, False]
    assert (extrapolation_reasons(joined, {"training_gpus": ["A"]}) == "").all()
    with pytest.raises(KeyError, match=r"setting column\(s\) \['framework_version'\]"):
        training_settings(trained.drop(columns="framework_version"))


def test_request_schema_documents_every_field():
    schema = request_schema({**META, "input_columns": ["model_key"]})
    assert schema["batch_size"] == {"type": "integer", "required": True, "range": [1, 65536],
                                    "unit": VALID_RANGES["batch_size"][2]}
    assert schema["memory_layout"]["default"] == "nchw" and schema["precision"]["values"] == ["amp_fp16", "fp32"]
    assert schema["model_key"]["required"] is False and schema["family"]["values"].startswith("any")


def post(url, records):
    return requests.post(f"{url}/invocations", json={"dataframe_records": records}, timeout=60)


def test_serve_valid_then_malformed_then_valid(server):
    r = post(server, [VALID, {**VALID, "gpu": "GeForce RTX 3090", "precision": "fp32", "mode": "training"}])
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert len(preds) == 2 and all(p["latency_ms"] > 0 for p in preds)

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
