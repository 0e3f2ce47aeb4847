"""The pipeline's `calibrate` stage: a calibration is reused only for the same run, levels and kinds; a run tested
on other rows than the rebuilt split is refused; the summary holds the figures DVC compares."""

from __future__ import annotations

import dataclasses
import json

import pytest

from src.predict.calibrate import reusable, summary
from src.predict.conformal import QUANTILE_RULE_VERSION
from src.predict.model import LoadedModel


def _model(run_id: str | None = "r1", meta: dict | None = None) -> LoadedModel:
    return LoadedModel("models:/m@champion", pipeline=None, meta=meta or {}, gpus=None, run_id=run_id,
                       conformal=None)


CAL = {"run_id": "r1", "model_uri": "models:/m@champion", "k": 3, "levels": [0.8, 0.9], "train_rows": 70,
       "quantile_rule_version": QUANTILE_RULE_VERSION,
       "test_rows": 30, "split_fingerprint": "abc",
       "quantiles": {"row": {"0.80": 0.1, "0.90": 0.2}, "gpu": {"0.80": 0.3, "0.90": 0.5}},
       "test_coverage": {"0.80": {"coverage": 0.79}, "0.90": {"coverage": 0.905}}}


def test_reusable_only_for_the_same_run_levels_and_kinds():
    assert reusable(CAL, _model(), [0.8, 0.9], ["row", "gpu"])
    assert reusable(CAL, _model(), [0.9], ["row"])  # a subset is answered
    assert not reusable(None, _model(), [0.9], ["row"])
    assert not reusable(CAL, _model("r2"), [0.9], ["row"])  # a new champion run
    assert not reusable(CAL, _model(None), [0.9], ["row"])
    assert not reusable(CAL, _model(), [0.95], ["row"])  # a level it lacks
    assert not reusable(CAL, _model(), [0.9], ["row", "cnn"])  # a kind it lacks
    assert reusable(CAL, _model(), [0.9], ["row"], k=3) and not reusable(CAL, _model(), [0.9], ["row"], k=2)
    # a model that names its split (fit-holdout) must name the calibration's
    assert reusable(CAL, _model(meta={"split_fingerprint": "abc"}), [0.9], ["row"])
    assert not reusable(CAL, _model(meta={"split_fingerprint": "xyz"}), [0.9], ["row"])


def test_a_calibration_pooled_where_folds_are_now_balanced_is_not_reused():
    """A calibration made before the runtime kind weighed each held-out runtime equally (no `balanced_kinds`) is
    recalibrated by the pipeline's `calibrate --reuse`, so the served model gets the new quantile."""
    with_runtime = {**CAL, "quantiles": {**CAL["quantiles"], "runtime": {"0.80": 0.9, "0.90": 1.2}}}
    assert not reusable(with_runtime, _model(), [0.9], ["row", "runtime"])
    assert reusable({**with_runtime, "balanced_kinds": ["runtime"]}, _model(), [0.9], ["row", "runtime"])
    # asked to pool by rows, a balanced calibration is not reused either
    assert not reusable({**with_runtime, "balanced_kinds": ["runtime"]}, _model(), [0.9], ["row", "runtime"],
                        balanced=())
    # quantiles computed by an older rule (or before the rule had a version) are recomputed: a calibration kept
    # across the change would differ from a fresh clone's (found at 162cf1e: --reuse kept the first balanced rule's)
    assert not reusable({k: v for k, v in CAL.items() if k != "quantile_rule_version"}, _model(), [0.9], ["row"])
    assert not reusable({**CAL, "quantile_rule_version": QUANTILE_RULE_VERSION - 1}, _model(), [0.9], ["row"])
    # kinds not requested do not matter: a full calibration (runtime balanced) answers a request for row and gpu
    assert reusable(CAL, _model(), [0.9], ["row", "gpu"], balanced=("arch", "runtime"))
    assert reusable({**with_runtime, "balanced_kinds": ["runtime"]}, _model(), [0.9], ["row"])


def test_summary_reads_coverage_and_width_factors():
    s = summary({**CAL, "grouped_coverage": {"gpu": {"pooled": {"0.80": {"coverage": 0.851}}}}})
    assert s["test_coverage"] == {"0.80": 0.79, "0.90": 0.905}
    assert s["width_factor"]["gpu"]["0.90"] == pytest.approx(1.6487, abs=1e-4)  # exp(0.5)
    assert s["grouped_coverage"] == {"gpu": {"0.80": 0.851}}
    assert "grouped_coverage" not in summary(CAL)


def test_calibration_refuses_a_run_tested_on_other_rows(holdout_model, real_overrides):
    """A pipeline run tags the md5 of its held-out ids; a rebuilt split naming other rows is refused, the same
    tag is accepted."""
    import mlflow

    from src.predict.calibrate import check_run_split, run_split_fingerprint
    from src.predict.data import load_split
    from src.predict.model import load
    from src.train import fingerprint

    model = load(holdout_model["registered"])
    data = load_split(model.meta["features"], ["densenet"], real_overrides, 8000)
    with mlflow.start_run(run_name="tagged-elsewhere") as run:
        mlflow.set_tag("split_fingerprint", "0" * 32)
    stale = dataclasses.replace(model, run_id=run.info.run_id)
    assert run_split_fingerprint(run.info.run_id) == "0" * 32
    with pytest.raises(ValueError, match="tested on other rows"):
        check_run_split(stale, data)
    with mlflow.start_run(run_name="tagged-here") as run:
        mlflow.set_tag("split_fingerprint", fingerprint(data.df["measurement_id"].to_numpy()[data.test]))
    check_run_split(dataclasses.replace(model, run_id=run.info.run_id), data)
    check_run_split(dataclasses.replace(model, run_id=None), data)  # no run, nothing to compare


def test_cli_calibrates_once_then_reuses(holdout_model, real_overrides, tmp_path, capsys, monkeypatch):
    """`calibrate --reuse` (the stage's command): the first call calibrates and logs next to the model, the second
    keeps that calibration and writes the same report; a kind it lacks calibrates again."""
    from src.predict.__main__ import main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", holdout_model["tracking_uri"])
    uri = holdout_model["registered"]
    common = ["calibrate", "--model-uri", uri, "--k", "2", "--levels", "0.9", "--max-rows", "8000", "--reuse",
              "--out", str(tmp_path)]
    assert main([*common, "--kinds", "row", "--stem", "first", "--summary", str(tmp_path / "s1.json"),
                 *real_overrides]) == 0
    first = capsys.readouterr().out
    assert main([*common, "--kinds", "row", "--stem", "second", "--summary", str(tmp_path / "s2.json"),
                 *real_overrides]) == 0
    second = capsys.readouterr().out
    assert "kept it" in second and "logged to run" in first
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("first", "second"))
    assert a == b and a["k"] == 2 and list(a["quantiles"]) == ["row"]
    assert "run_id" not in a and "seconds" not in a  # the report is the same bytes for the same calibration
    s = json.loads((tmp_path / "s2.json").read_text())
    assert 0 < s["test_coverage"]["0.90"] <= 1 and s["width_factor"]["row"]["0.90"] > 1
    assert main([*common, "--kinds", "cnn", "--stem", "third", *real_overrides]) == 0
    assert "kept it" not in capsys.readouterr().out
    assert list(json.loads((tmp_path / "third.json").read_text())["quantiles"]) == ["cnn"]


def test_parallel_fold_fits_give_the_same_scores(holdout_model, real_overrides):
    """The stage fits the cross-conformal folds in worker processes (`--jobs`): the scores are those of one process."""
    import numpy as np
    from sklearn.base import clone

    from src.predict import conformal
    from src.predict.data import load_split
    from src.predict.model import load

    model = load(holdout_model["registered"])
    data = load_split(model.meta["features"], ["densenet"], real_overrides, 8000)
    part = data.df.iloc[data.train[:3000]].reset_index(drop=True)
    X, y = part[data.cols], part["target"].to_numpy(dtype=float)
    args = (clone(model.pipeline), X, y, ("row", "gpu"), part["gpu"].astype(str), part["family"].astype(str), 2, 7)
    one, two = conformal.all_oof_scores(*args, jobs=1), conformal.all_oof_scores(*args, jobs=2)
    assert list(one) == ["row", "gpu"] and all(len(one[k]) == len(X) for k in one)
    for kind in one:
        np.testing.assert_array_equal(one[kind], two[kind])
    # one kind alone is the same as that kind among others
    np.testing.assert_array_equal(conformal.oof_scores(args[0], X, y, "gpu", args[4], args[5], 2, 7), one["gpu"])


def test_a_new_run_of_the_same_model_keeps_the_committed_report(holdout_model, real_overrides, tmp_path, capsys,
                                                                monkeypatch):
    """A fresh clone's pipeline registers a new run of the same model: `calibrate --reuse` keeps the report the last
    run wrote when the model fingerprint (code, split, answers) is the same, and refits where it is not."""
    from src.predict import __main__ as cli
    from src.predict import conformal
    from src.predict import model as model_module
    from src.predict.calibrate import model_fingerprint, model_split

    monkeypatch.setenv("MLFLOW_TRACKING_URI", holdout_model["tracking_uri"])
    uri = holdout_model["registered"]
    def args(*kinds: str) -> list[str]:
        return ["calibrate", "--model-uri", uri, "--k", "2", "--levels", "0.9", "--max-rows", "8000", "--reuse",
                "--kinds", *kinds, "--out", str(tmp_path), "--stem", "report", "--no-log", *real_overrides]

    common = args("row")
    assert cli.main(common) == 0
    report = tmp_path / "report.json"
    made = report.read_bytes()
    cal = json.loads(made)
    trained = model_module.load(uri)
    assert cal["model_fingerprint"] == model_fingerprint(trained, model_split(trained, real_overrides, 8000))

    # the same model as another run that holds no calibration: the report is kept, nothing is refitted
    fresh = dataclasses.replace(trained, run_id=None, conformal=None)
    monkeypatch.setattr(model_module, "load", lambda _uri: fresh)
    fits = []
    real_calibrate = conformal.calibrate
    monkeypatch.setattr(conformal, "calibrate", lambda *a, **kw: fits.append(1) or real_calibrate(*a, **kw))
    capsys.readouterr()
    assert cli.main(common) == 0
    assert "same fingerprint" in capsys.readouterr().out and not fits
    assert report.read_bytes() == made

    # a report made for other answers (another model, or other code) is refitted, and the refit writes the truth
    report.write_text(json.dumps({**cal, "model_fingerprint": "0" * 32}, indent=2) + "\n")
    assert cli.main(common) == 0
    assert fits and report.read_bytes() == made
    # ... as is one that lacks a kind asked for now, or holds one more than asked (it would not be the same bytes)
    fits.clear()
    assert cli.main(args("row", "cnn")) == 0
    assert fits and set(json.loads(report.read_text())["quantiles"]) == {"row", "cnn"}
