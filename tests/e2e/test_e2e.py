"""End-to-end model on real measurement rows: fitting, hold-out protocols, and the run() entry with MLflow."""

import numpy as np
import pandas as pd
import pytest

from src.e2e.model import (
    Linear,
    eligible_rows,
    evaluate,
    fit_linear,
    group_keys,
    holdout_mask,
    label_groups,
)


@pytest.fixture(scope="module")
def rows(real_overrides):
    path = next(o.split("=", 1)[1] for o in real_overrides if o.startswith("data.measurements="))
    return eligible_rows(pd.read_parquet(path))


def test_fit_linear_recovers_exact_line_and_total_time():
    b = np.array([1, 8, 32, 128], dtype=float)
    fit = fit_linear(b, 0.7 + 0.05 * b)
    assert fit.a == pytest.approx(0.7, rel=1e-6) and fit.b == pytest.approx(0.05, rel=1e-6)
    assert fit.total_ms(64, 1000) == pytest.approx(1000 * (0.7 + 0.05 * 64))
    prop = fit_linear(b, 0.7 + 0.05 * b, intercept=False)
    assert prop.a == 0.0 and prop.b > 0


def test_fit_linear_rejects_bad_times():
    with pytest.raises(ValueError, match="positive"):
        fit_linear(np.array([1.0, 2.0]), np.array([1.0, 0.0]))


def test_groups_share_context_and_have_several_batches(rows):
    d = label_groups(rows, "strict", 3)
    keys = group_keys(rows, "strict")
    assert d["group"].nunique() >= 100  # DLInfBench: 8 batch sizes per (CNN, GPU, framework)
    per = d.groupby("group")
    assert (per["batch_size"].nunique() >= 3).all()
    assert (per[keys].nunique() <= 1).all().all()  # one software context per group
    assert "framework_version" not in group_keys(rows, "relaxed")
    with pytest.raises(ValueError, match="strict"):
        group_keys(rows, "loose")


def test_lobo_holds_out_every_row_once(rows):
    d = label_groups(rows, "strict", 3)
    masks = holdout_mask(d, "lobo")
    assert np.array_equal(np.sum(masks, axis=0), np.ones(len(d)))
    (largest,) = holdout_mask(d, "largest")
    assert (d.loc[largest, "batch_size"].to_numpy()
            == d.loc[largest].groupby("group")["batch_size"].transform("max").to_numpy()).all()


def test_linear_beats_proportional_on_held_out_largest_batch(rows):
    """Real DLInfBench deployments: extrapolating to the largest batch with a + b*batch is accurate, and the
    fixed per-step cost matters (a = 0 is much worse)."""
    d = label_groups(rows, "strict", 3)
    held = holdout_mask(d, "largest")[0]
    pred = evaluate(d, held)
    ape = np.abs(pred["e2e_ms"] - pred["measured_ms"]) / pred["measured_ms"] * 100
    ape_prop = np.abs(pred["proportional_ms"] - pred["measured_ms"]) / pred["measured_ms"] * 100
    # every group answers, once per held-out row: a repeated run or two names of one network (torchvision and
    # timm vgg16, one model_key) put two rows at a group's largest batch
    assert len(pred) == held.sum() and d.loc[held, "group"].nunique() == d["group"].nunique()
    assert held.sum() > d["group"].nunique()
    assert ape.mean() < 20 and ape.mean() < ape_prop.mean()
    assert (pred["fit_kind"] == "linear").all()


def test_one_point_groups_fall_back_to_proportional(rows):
    d = label_groups(rows[rows["mode"] == "training"], "relaxed", 2)  # timm training rows across releases
    pred = evaluate(d, holdout_mask(d, "largest")[0])
    one = pred[pred["n_fit_batches"] == 1]
    assert len(one) > 0 and (one["fit_kind"] == "proportional_1pt").all() and (one["a_ms"] == 0).all()


def test_run_logs_metrics_and_compares_with_global(real_overrides, tmp_path):
    import mlflow
    from omegaconf import OmegaConf

    from src.config import compose
    from src.e2e.run import run

    cfg = OmegaConf.to_container(compose(real_overrides), resolve=True)
    cfg["e2e"] = {"contexts": ["strict"], "protocols": ["largest", "lobo"], "compare_protocols": ["largest"],
                  "min_batches": 3, "global_params": {"n_estimators": 20, "max_depth": 5},
                  "reports_dir": str(tmp_path / "e2e"), "iterations_mirror": str(tmp_path / "no-mirror")}
    s = run(cfg)
    r = s["results"]["strict"]["largest"]
    cmp_ = r["global_comparison"]
    assert r["rows"] > 100 and 0 < cmp_["rows"] <= r["rows"]
    assert cmp_["rows"] + cmp_["rows_not_in_global_dataset"] == r["rows"]
    assert np.isfinite(cmp_["global_mape"]) and np.isfinite(cmp_["e2e_mape"])
    assert s["results"]["strict"]["lobo"]["rows"] > r["rows"]
    assert (tmp_path / "e2e" / "e2e_vs_global.png").exists()
    assert (tmp_path / "e2e" / "coefficients_strict.csv").exists()
    assert "skipped" in s["iterations"]  # no mirror there: said, not silently ignored
    runs = mlflow.search_runs(experiment_names=["cnnperf-e2e"])
    assert len(runs) == 1 and runs["metrics.strict.largest.same_rows.global_mape"].notna().all()
    with pytest.raises(ValueError, match="unknown key"):
        run({**cfg, "e2e": {"nope": 1}})


def test_linear_dataclass_vectorises():
    assert np.allclose(Linear(1.0, 0.5).step_ms([0, 2]), [1.0, 2.0])


def test_iterations_axis_on_real_per_iteration_files():
    """ryujaehun timed every iteration: the total of ~50 iterations follows iters * step from a short profile."""
    from src.config import REPO_ROOT
    from src.e2e import iterations

    mirror = (REPO_ROOT / ".." / "shared" / "data" / "raw").resolve()
    samples = iterations.read_samples(mirror)
    ev = iterations.evaluate(samples, fit_iters=10)
    assert len(ev) > 500 and set(ev["mode"]) == {"inference", "training"}
    one = ev.iloc[0]
    t = samples[(samples["file"] == one["file"]) & (samples["model"] == one["model"])].sort_values("iteration")["ms"]
    assert one["measured_total_ms"] == pytest.approx(t.sum())
    assert one["product_short_ms"] == pytest.approx(len(t) * np.median(t.to_numpy()[1:10]))
    s = iterations.summary(ev)
    assert s["all"]["product_short_mape"] < 10 and s["training"]["series"] > 100
    with pytest.raises(FileNotFoundError, match="ryujaehun"):
        iterations.read_samples(mirror / "nowhere")


def _frame(batches, ms, physics):
    n = len(batches)
    return pd.DataFrame({"measurement_id": [f"m{i}" for i in range(n)], "group": 0, "batch_size": batches,
                         "latency_ms": ms, "physics_ms": physics})


def test_one_point_groups_scale_by_the_physics_estimate():
    """Batch 1 -> 256 with one fit point: the estimate's launch floor carries the answer, not a = 0."""
    d = _frame([1, 256], [5.0, 30.0], [2.0, 10.0])
    pred = evaluate(d, np.array([False, True]))
    assert pred["fit_kind"].tolist() == ["physics_1pt"]
    assert pred["e2e_ms"].iloc[0] == pytest.approx(5.0 * 10.0 / 2.0)
    assert pred["proportional_ms"].iloc[0] == pytest.approx(5.0 * 256)  # the baseline stays beside it
    assert pred["physics_scale"].iloc[0] == pytest.approx(2.5) and np.isnan(pred["a_ms"].iloc[0])
    # no estimate on either side: the proportional special case, flagged
    for physics in ([np.nan, 10.0], [2.0, np.nan]):
        pred = evaluate(_frame([1, 256], [5.0, 30.0], physics), np.array([False, True]))
        assert pred["fit_kind"].tolist() == ["proportional_1pt"] and pred["e2e_ms"].iloc[0] == pytest.approx(1280)
    # two batch sizes left: the linear fit, whatever the estimate says
    pred = evaluate(_frame([1, 8, 256], [1.0, 1.7, 26.5], [9.0, 9.0, 9.0]), np.array([False, False, True]))
    assert pred["fit_kind"].tolist() == ["linear"] and pred["e2e_ms"].iloc[0] == pytest.approx(26.5, rel=1e-6)


def test_physics_estimates_beat_a_zero_on_real_one_point_deployments(real_overrides, rows):
    """Real rows: deployments measured at two batch sizes (timm, Lambda; with the repo's tables also our own H200
    runs at batch 1 and 256, which a = 0 put 25-80x off) predicted from the other one."""
    from omegaconf import OmegaConf

    from src.config import REPO_ROOT, compose
    from src.e2e.run import physics_estimates
    from src.features.dataset import build_dataset

    cfg = OmegaConf.to_container(compose(real_overrides), resolve=True)
    dataset, _, _ = build_dataset(REPO_ROOT, cfg["data"], cfg["features"], cfg["target"], seed=cfg["seed"])
    est = physics_estimates(cfg, dataset)
    assert est.index.is_unique and len(est) > 0.7 * len(dataset) and (est > 0).all()
    priced = rows.assign(physics_ms=rows["measurement_id"].map(est).astype(float))
    d = label_groups(priced, "strict", 2)
    pred = evaluate(d, holdout_mask(d, "largest")[0])
    one = pred[pred["fit_kind"] == "physics_1pt"]
    assert len(one) >= 500

    def mape(col):
        return float(np.mean(np.abs(one[col] - one["measured_ms"]) / one["measured_ms"]) * 100)

    assert mape("e2e_ms") < 10 and mape("e2e_ms") < mape("proportional_ms") - 0.5


@pytest.mark.parametrize(("change", "message"), [
    ({"min_batches": 1}, r"e2e.min_batches: an integer >= 2"),
    ({"min_batches": "abc"}, r"e2e.min_batches: an integer >= 2, got 'abc'"),
    ({"max_groups": 0}, r"e2e.max_groups: an integer >= 1 or null"),
    ({"iterations_fit": -5}, r"e2e.iterations_fit: an integer >= 2"),
    ({"compare_protocols": ["bogus"]}, r"e2e.compare_protocols: unknown \['bogus'\]"),
    ({"protocols": ["lobo"], "compare_protocols": ["largest"]}, r"e2e.compare_protocols: unknown \['largest'\]"),
    ({"contexts": ["loose"]}, r"e2e.contexts: unknown \['loose'\]"),
    ({"data_modes": "synthetic"}, r"e2e.data_modes: a list"),
])
def test_settings_name_the_bad_key(change, message):
    from src.e2e.run import settings

    with pytest.raises(ValueError, match=message):
        settings({"e2e": change})


def test_run_names_settings_that_leave_nothing(real_overrides, tmp_path, capsys):
    from src.e2e.__main__ import main

    base = [*real_overrides, f"e2e.reports_dir={tmp_path}/e2e", f"e2e.iterations_mirror={tmp_path}/none"]
    assert main([*base, "e2e.data_modes=[bogus]"]) == 2
    assert "e2e.data_modes=['bogus']: no single-GPU row has these data modes" in capsys.readouterr().err
    assert main([*base, "e2e.min_batches=1000"]) == 2
    assert "e2e.min_batches=1000: no deployment (strict context) has that many distinct batch sizes" in \
        capsys.readouterr().err


def test_iterations_report_the_series_they_leave_out(tmp_path):
    from src.e2e import iterations

    folder = tmp_path / iterations.SOURCE_DIR
    folder.mkdir()
    values = {"resnet18": [3.0] + [1.0] * 29, "vgg16": [4.0] + [2.0] * 28 + ["ERR"]}
    pd.DataFrame(values).to_csv(folder / "Tesla_V100_1_gpus__float_model_inference_x.csv", index=False)
    samples = iterations.read_samples(tmp_path)
    assert iterations.evaluate(samples, 10)["model"].tolist() == ["resnet18"]
    left = iterations.skipped(samples, 10)
    assert left[["model", "reason"]].values.tolist() == [["vgg16", "not a positive number"]]
    assert iterations.skipped(samples, 20)["reason"].tolist() == ["fewer than 2 x 20 iterations",
                                                                  "not a positive number"]
