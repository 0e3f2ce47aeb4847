"""Request shapes MLflow's scoring server hands over (parsed by its own JSON parser, as `mlflow models serve` does):
a duplicated column, a list where a name belongs, `inputs` of single values or of uneven lists each get a 400
naming the field, never a stack trace."""

from __future__ import annotations

import json

import pytest
from mlflow.pyfunc.scoring_server import _parse_json_data

from src.features.request import RequestChecker, RequestError

VALID = {"gpu": "GeForce RTX 4090", "model_key": "resnet50", "param_count_m": 25.56, "gmacs": 4.11,
         "activations_m": 11.11, "batch_size": 32, "img_size": 224, "precision": "amp_fp16", "mode": "inference"}
META = {"numeric_inputs": ["param_count_m", "gmacs", "activations_m", "batch_size", "img_size"],
        "categorical_inputs": ["precision", "mode", "memory_layout", "compile_mode", "family"], "ptx_features": [],
        "open_categorical": ["family"], "input_columns": ["model_key"],
        "categories": {"precision": ["amp_fp16", "fp32"], "mode": ["inference", "training"],
                       "memory_layout": ["nchw"], "compile_mode": ["eager"]}}
GPUS = ["GeForce RTX 4090", "GeForce RTX 3090"]


class _Metadata:  # what _parse_json_data asks of a model without a signature from type hints
    def _is_signature_from_type_hint(self):
        return False


def served_check(body: dict):
    """The request as MLflow's scoring server parses it, then our check (what the pyfunc's predict runs)."""
    parsed = _parse_json_data(json.dumps(body), _Metadata(), None)
    return RequestChecker(META, GPUS).check(parsed.data)


def split(columns: list[str], row: list) -> dict:
    return {"dataframe_split": {"columns": columns, "data": [row]}}


@pytest.mark.parametrize("body,message", [
    (split([*VALID, "gmacs"], [*VALID.values(), 4.11]),
     "field(s) sent more than once: 'gmacs' (2 times); send each field once"),
    (split([*VALID, "gpu"], [*VALID.values(), "GeForce RTX 4090"]),
     "field(s) sent more than once: 'gpu' (2 times)"),
    ({"dataframe_records": [{**VALID, "model_key": ["a"]}]},
     "field 'model_key' row 0: a CNN name (string) is required, got ['a']"),
    ({"dataframe_records": [VALID, {**VALID, "gpu": ["GeForce RTX 4090"]}]},
     "field 'gpu' row 1: a GPU name (string) is required, got ['GeForce RTX 4090']"),
    ({"dataframe_records": [{**VALID, "precision": {"x": 1}}]},
     "field 'precision' row 0: a text value is required, got {'x': 1}"),
    ({"dataframe_records": [{**VALID, "model_key": 7}]},
     "field 'model_key' row 0: a CNN name (string) is required, got 7"),
    ({"inputs": {**{k: [v, v] for k, v in VALID.items()}, "gmacs": [4.11]}},
     "`inputs` fields have different lengths {'gpu': 2, 'model_key': 2, 'param_count_m': 2, 'gmacs': 1,"),
    ({"inputs": {**{k: [v] for k, v in VALID.items()}, "gmacs": 4.11}},
     "field(s) ['gmacs']: a single value where the other fields are lists"),
])
def test_malformed_shapes_name_the_field(body, message):
    with pytest.raises(RequestError) as err:
        served_check(body)
    assert err.value.message.startswith(message.split(":")[0]) and message in err.value.message
    assert err.value.get_http_status_code() == 400


def test_inputs_of_single_values_or_of_lists_is_one_row_each():
    cols, rows = served_check({"inputs": VALID})  # MLflow turns each JSON scalar into a 0-d array
    assert len(rows) == 1 and cols["gmacs"][0] == 4.11 and cols["gpu"][0] == "GeForce RTX 4090"
    cols, rows = served_check({"inputs": {k: [v, v] for k, v in VALID.items()}})
    assert len(rows) == 2 and list(cols["model_key"]) == ["resnet50", "resnet50"]
