"""`python -m src.predict` arguments: each bad value is an `error: ...` naming the argument, before any work; a CNN
name in another case is the model's known CNN (contradicting GMACs are flagged); malformed calibration files are
refused."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from src.predict.__main__ import main

RESNET50 = ["--params-m", "25.56", "--gmacs", "4.11", "--activations-m", "11.11", "--img-size", "224"]
GPU = ["--gpus", "GeForce RTX 4090"]


@pytest.mark.parametrize("args,message", [
    (["--level", "1.5"], "argument --level: 1.5 must be a number between 0 and 1"),
    (["--level", "0"], "argument --level: 0 must be a number between 0 and 1"),
    (["--level", "nan"], "argument --level: nan must be a number between 0 and 1"),
    (["--top", "-1"], "argument --top: -1 must be >= 1"),
    (["--batch", "0"], "argument --batch: 0 must be >= 1"),
    (["calibrate", "--levels", "0.8", "1.5"], "argument --levels: 1.5 must be a number between 0 and 1"),
    (["calibrate", "--levels", "0"], "argument --levels: 0 must be a number between 0 and 1"),
    (["calibrate", "--k", "1"], "argument --k: 1 must be >= 2"),
    (["calibrate", "--k", "0"], "argument --k: 0 must be >= 2"),
    (["fit-holdout", "--exclude-family", "vgg", "--k", "1"], "argument --k: 1 must be >= 2"),
])
def test_bad_arguments_are_refused_before_any_work(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args if args[0] in ("calibrate", "fit-holdout") else ["--model", "resnet50", *RESNET50, *GPU, *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_duplicate_batch_sizes_are_an_error(tmp_path, capsys):
    rc = main(["--model-uri", "models:/never-loaded@champion", "--model", "resnet50", *RESNET50, *GPU,
               "--batch", "1", "32", "32", "--out", str(tmp_path)])
    assert rc == 2
    assert "error: --batch 1 32 32: 32 given more than once; give each batch size once" in capsys.readouterr().err


def test_level_not_calibrated_and_malformed_calibration_files(holdout_model, tmp_path, capsys):
    uri = holdout_model["registered"]
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"quantiles": {"row": {"0.80": 0.1, "0.90": 0.2}}}))
    base = ["--model-uri", uri, "--model", "resnet50", *RESNET50, *GPU, "--out", str(tmp_path)]
    assert main([*base, "--conformal", str(cal), "--level", "0.5"]) == 2
    assert "error: --level 0.5 is not calibrated; calibrated levels: 0.8, 0.9" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    assert main([*base, "--conformal", str(bad)]) == 2
    assert f"error: {bad}: not valid JSON (line 1, column 2: " in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    assert main([*base, "--conformal", str(empty)]) == 2
    assert f"error: {empty} is not a calibration (missing keys ['quantiles']" in capsys.readouterr().err


def test_a_cnn_name_in_another_case_is_the_known_cnn_and_contradicting_gmacs_are_flagged(holdout_model, tmp_path,
                                                                                        capsys):
    uri = holdout_model["registered"]
    base = ["--model-uri", uri, *RESNET50, "--batch", "1", "32", "--gpus", "GeForce RTX 4090", "A100 PCIe 40 GB",
            "--out", str(tmp_path)]
    assert main([*base, "--model", "resnet50", "--stem", "exact"]) == 0
    capsys.readouterr()
    assert main([*base, "--model", "ResNet50", "--stem", "upper"]) == 0
    out = capsys.readouterr().out
    assert "note: CNN name 'ResNet50' is the model's known CNN 'resnet50'" in out
    assert "layer profile (known): resnet50 at 224 px" in out
    exact, upper = pd.read_csv(tmp_path / "exact.csv"), pd.read_csv(tmp_path / "upper.csv")
    assert exact["latency_ms"].tolist() == upper["latency_ms"].tolist()
    assert exact["extrapolation"].astype(str).tolist() == upper["extrapolation"].astype(str).tolist()
    numbers = [a if a != "4.11" else "400" for a in base]
    assert main([*numbers, "--model", "resnet50", "--stem", "contradicting"]) == 0
    out = capsys.readouterr().out
    assert "note: --gmacs 400 contradicts the known CNN 'resnet50', whose kernel profile at 224" in out
    flagged = pd.read_csv(tmp_path / "contradicting.csv")
    assert not flagged["in_training_range"].any()
    assert flagged["extrapolation"].str.contains("gmacs 400 contradicts the known CNN 'resnet50'").all()


def test_contradicting_gmacs_take_an_unseen_cnns_interval(holdout_model, tmp_path):
    # the escalation kinds narrower than every novelty, so each row's kind is its novelty
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"train_gpus": ["GeForce RTX 4090"], "train_model_keys": ["resnet50"],
                               "quantiles": {kind: {"0.80": q, "0.90": q} for kind, q in
                                             [("row", 0.1), ("gpu", 0.2), ("cnn", 0.3), ("gpu_cnn", 0.4),
                                              ("arch", 0.01), ("runtime", 0.01), ("setup", 0.01)]}}))
    base = ["--model-uri", holdout_model["registered"], "--model", "resnet50", "--batch", "1", "--gpus",
            "GeForce RTX 4090", "A100 PCIe 40 GB", "--conformal", str(cal), "--out", str(tmp_path)]
    assert main([*base, *RESNET50, "--stem", "own"]) == 0
    numbers = [a if a != "4.11" else "400" for a in RESNET50]
    assert main([*base, *numbers, "--stem", "contradicting"]) == 0
    own = pd.read_csv(tmp_path / "own.csv").set_index("gpu")["interval_kind"]
    flagged = pd.read_csv(tmp_path / "contradicting.csv").set_index("gpu")["interval_kind"]
    assert own.to_dict() == {"GeForce RTX 4090": "row", "A100 PCIe 40 GB": "gpu"}
    # neither CNN's answer: an unseen CNN's interval, as the served answer's (src/features/intervals.py)
    assert flagged.to_dict() == {"GeForce RTX 4090": "cnn", "A100 PCIe 40 GB": "gpu_cnn"}


def test_skipped_gpus_are_printed_with_their_reason(holdout_model, tmp_path, capsys):
    rc = main(["--model-uri", holdout_model["registered"], "--model", "resnet50", *RESNET50, "--gpus",
               "GeForce GTX 580", "GeForce RTX 4090", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "1 GPU record(s) left out" in out
    assert "  GeForce GTX 580: compute capability 2.0 is below 3.0, the oldest the model answers for" in out


def test_a_known_cnn_by_its_name_alone_is_priced_by_its_training_rows_numbers(holdout_model, tmp_path, capsys):
    from src.predict.model import load

    uri = holdout_model["registered"]
    numbers = load(uri).meta["known_cnn_numbers"]
    size, params_m, gmacs, activations_m = numbers["resnet50"][0]
    base = ["--model-uri", uri, "--batch", "1", "32", "--gpus", "GeForce RTX 4090", "A100 PCIe 40 GB",
            "--out", str(tmp_path)]
    assert main([*base, "--model", "ResNet50", "--stem", "by_name"]) == 0
    out = capsys.readouterr().out
    assert (f"note: CNN 'resnet50' priced by the numbers of the model's training rows at {size} px: {params_m:g} M "
            f"params, {gmacs:g} GMACs") in out
    assert main([*base, "--model", "resnet50", "--params-m", str(params_m), "--gmacs", str(gmacs),
                 "--activations-m", str(activations_m), "--img-size", str(size), "--stem", "by_numbers"]) == 0
    by_name, given = pd.read_csv(tmp_path / "by_name.csv"), pd.read_csv(tmp_path / "by_numbers.csv")
    assert by_name["latency_ms"].tolist() == given["latency_ms"].tolist()
    capsys.readouterr()
    # a size the model never measured it at, and a name it does not know, say what to give instead
    assert main([*base, "--model", "resnet50", "--img-size", "999"]) == 2
    assert f"error: --img-size 999: the model knows 'resnet50' only at {size}" in capsys.readouterr().err
    assert main([*base, "--model", "my_own_net"]) == 2
    assert "error: --model 'my_own_net' is not a CNN the model was trained on: give --source" in capsys.readouterr().err
