"""The served request's check: messages lead with the field, row, value and what is allowed; the schema."""

import pandas as pd
import pytest
from mlflow.exceptions import MlflowException

from src.features.request import VALID_RANGES, RequestError, request_schema, validate_request

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
    ({"gpu": "RTX 4080"}, "unknown GPU 'RTX 4080'; closest known: ['GeForce RTX 4090'"),
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


def test_request_schema_documents_every_field():
    schema = request_schema({**META, "input_columns": ["model_key"]})
    assert schema["batch_size"] == {"type": "integer", "required": True, "range": [1, 65536],
                                    "unit": VALID_RANGES["batch_size"][2]}
    assert schema["memory_layout"]["default"] == "nchw" and schema["precision"]["values"] == ["amp_fp16", "fp32"]
    assert schema["model_key"]["required"] is False and schema["family"]["values"].startswith("any")
