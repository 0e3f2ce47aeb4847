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
    pred = evaluate(d, holdout_mask(d, "largest")[0])
    ape = np.abs(pred["e2e_ms"] - pred["measured_ms"]) / pred["measured_ms"] * 100
    ape_prop = np.abs(pred["proportional_ms"] - pred["measured_ms"]) / pred["measured_ms"] * 100
    assert len(pred) == d["group"].nunique()
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
