"""Small corrupt files made by the tests: every bad row lands in quarantine with its reason."""

import pytest

from src.ingest.gpus import UnknownGPUError
from src.ingest.sources import ryujaehun, timm
from src.ingest.validate import validate

HEADER = ("model,infer_img_size,infer_samples_per_sec,infer_step_time,infer_batch_size,"
          "param_count,infer_gmacs,infer_macts\n")
GOOD = "resnet50,224,2000.0,128.0,256,25.56,4.11,11.11\n"


def _timm(tmp_path, body, name="benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv", header=HEADER):
    path = tmp_path / name
    path.write_text(header + body)
    result = timm.parse_file(path, f"timm/{name}", "abc")
    frame, rejected = validate(result.rows)
    quarantine = result.quarantine + rejected
    assert len(frame) + len(quarantine) == result.n_read  # nothing is lost
    return frame, {q["row_key"]: q["reason"] for q in quarantine}


def test_bad_numbers(tmp_path):
    body = (GOOD + "resnet18,224,abc,10.0,256,11.7,1.8,2.5\n" + "resnet34,224,1000.0,-5.0,256,21.8,3.6,3.7\n"
            + "resnet101,224,1000.0,100.0,,44.5,7.8,16.2\n" + "vgg16,224,1000.0,100.0,0.5,138,15.5,13.6\n"
            + "vgg19,224,50.0,100.0,256,143,19.6,14.9\n")
    frame, reasons = _timm(tmp_path, body)
    assert list(frame["model"]) == ["resnet50"]
    assert reasons["line 3"] == "non-numeric throughput: 'abc'"
    assert reasons["line 4"] == "non-positive latency_ms: -5"
    assert reasons["line 5"] == "missing batch size"
    assert reasons["line 6"].startswith("impossible batch_size")
    assert reasons["line 7"].startswith("impossible values: throughput 50/s disagrees")


def test_a_training_step_on_an_inference_only_runtime_is_quarantined(tmp_path):
    """TensorRT builds inference engines: a training row labelled with it is a mislabelled run, not a data point."""
    name = "benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv"
    (tmp_path / name).write_text(HEADER + GOOD + GOOD.replace("resnet50", "resnet18"))
    result = timm.parse_file(tmp_path / name, f"timm/{name}", "abc")
    result.rows[1].update(mode="training", compile_mode="tensorrt")
    frame, quarantine = validate(result.rows)
    assert list(frame["model"]) == ["resnet50"] and len(frame) + len(quarantine) == 2
    assert quarantine[0]["reason"] == ("impossible run: a training step with compile_mode 'tensorrt', a runtime "
                                       "that builds inference engines only")


def test_truncated_csv(tmp_path):
    frame, reasons = _timm(tmp_path, GOOD + "resnet18,224,2000.0")
    assert len(frame) == 1 and reasons["line 3"] == "truncated row: 3 of 8 fields"


def test_missing_column(tmp_path):
    header = "model,infer_img_size,infer_samples_per_sec,infer_batch_size\n"
    frame, reasons = _timm(tmp_path, "resnet50,224,2000.0,256\n", header=header)
    assert frame.empty and reasons["line 2"] == "missing column: infer_step_time"


def test_exact_duplicates_across_files(tmp_path):
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    name = "benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv"
    rows = []
    for folder in (a, b):
        (folder / name).write_text(HEADER + GOOD)
        rows += timm.parse_file(folder / name, f"timm/{folder.name}/{name}", "abc").rows
    frame, quarantine = validate(rows)
    assert len(frame) == 1
    assert quarantine[0]["reason"] == f"exact duplicate of timm:timm/a/{name}:2"


def test_unknown_gpu_stops_with_its_name(tmp_path):
    path = tmp_path / "benchmark-infer-amp-nchw-pt240-cu124-rtx9999.csv"
    path.write_text(HEADER + GOOD)
    with pytest.raises(UnknownGPUError, match="'rtx9999'"):
        timm.parse_file(path, "timm/" + path.name, "abc")


def test_ryujaehun_bad_sample(tmp_path):
    name = "A100-SXM4-40GB_1_gpus__float_model_inference_benchmark.csv"
    folder = tmp_path / "master" / "results" / "dgx-a100"
    folder.mkdir(parents=True)
    (folder / name).write_text("resnet18,resnet50\n5.0,10.0\n5.1,oops\n5.2,10.2\n5.0\n")
    rel = f"ryujaehun-pytorch-gpu-benchmark/master/results/dgx-a100/{name}"
    result = ryujaehun.parse_file(folder / name, rel, "abc", warmup=1)
    assert result.n_read == 2
    assert [r["model"] for r in result.rows] == ["resnet18"]
    assert result.rows[0]["n_samples"] == 3 and result.rows[0]["latency_ms"] == 5.1  # median of 5.1, 5.2, 5.0
    assert result.quarantine[0]["reason"] == "non-numeric sample at line 3: 'oops'"
