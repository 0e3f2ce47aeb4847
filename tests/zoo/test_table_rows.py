"""Stage logic on hand-made inputs (src/zoo/table.py): rows per (batch, cc), committed rows reused or recomputed,
extra batches and implausible results."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from src.zoo.table import count_rows
from src.zoo.targets import Target, batches_needed, compiled_batch_for
from tests.zoo.test_targets import _gpus, _meas


def _result(nvcc: dict[str, str]) -> dict:
    base = {"thread_instructions": 100, "warp_instructions": 10, "predicated_off": 0, "kernels": 3,
            "launches": 5, "estimate": False, "by_class": {"fma": 60, "integer": 40},
            "bytes_by_space": {"load.global": 400}}
    by_arch = {a: {**base, "ptx_arch": p, "thread_instructions": 100 if p == "sm_75" else 90}
               for a, p in nvcc.items()}
    return {"source": "torchvision", "model": "resnet50", "batch_size": 1, "seconds": 12.0, "zoo_version": "1",
            "by_arch": by_arch}


def test_count_rows_scale_and_arch_rule():
    t = Target("resnet50", "resnet50", "torchvision", 224, 3, None)
    keys = pd.DataFrame({"model_key": ["resnet50"] * 3, "img_size": [224] * 3, "batch_size": [1, 32, 32],
                         "compute_capability": [8.6, 8.6, 12.0]})
    # A result cached with an exact sm_120 PTX still follows the stage's rule nvcc_archs=[sm_75].
    res = _result({"sm_86": "sm_75", "sm_120": "sm_120"})
    rows = count_rows(t, {1: res}, keys, ["fma", "integer"], ["load.global"], nvcc_archs=["sm_75"])
    by = {(r["batch_size"], r["arch"]): r for r in rows}
    assert by[(1, "sm_86")]["ptx_thread_instructions"] == 100 and by[(1, "sm_86")]["count_method"] == "compiled"
    assert by[(32, "sm_86")]["ptx_thread_instructions"] == 3200
    assert by[(32, "sm_86")]["ptx_kernels"] == 3 and by[(32, "sm_86")]["ptx_bytes_load_global"] == 32 * 400
    assert by[(32, "sm_120")]["nvcc_arch"] == "sm_75" and by[(32, "sm_120")]["ptx_thread_instructions"] == 3200
    exact = count_rows(t, {1: res}, keys, [], [], nvcc_archs=None)
    assert {r["nvcc_arch"] for r in exact if r["arch"] == "sm_120"} == {"sm_120"}


def test_measured_batches_take_the_largest_compiled_batch_not_above_them():
    assert [compiled_batch_for(b, [1, 32]) for b in (1, 8, 31, 32, 256)] == [1, 1, 1, 32, 32]
    t = Target("resnet50", "resnet50", "torchvision", 224, 3, None)
    keys = pd.DataFrame({"model_key": ["resnet50"] * 4, "img_size": [224] * 4, "batch_size": [1, 16, 64, 256],
                         "compute_capability": [8.6] * 4})
    assert batches_needed(t, keys, [32, 128, 512]) == [32, 128]  # nothing measured at or above 512
    b32 = {**_result({"sm_86": "sm_75"}), "batch_size": 32}
    b32["by_arch"]["sm_86"]["thread_instructions"] = 2900  # per-sample counts fall as tiles fill up
    rows = {r["batch_size"]: r for r in count_rows(t, {1: _result({"sm_86": "sm_75"}), 32: b32}, keys, [], [])}
    assert rows[16]["ptx_thread_instructions"] == 1600 and rows[16]["count_method"] == "proportional_b1"
    assert rows[64]["ptx_thread_instructions"] == 5800 and rows[64]["count_method"] == "proportional_b32"
    assert rows[256]["ptx_thread_instructions"] == 2900 * 8


@pytest.mark.skipif(importlib.util.find_spec("timm") is not None, reason="needs an environment without timm")
def test_missing_extra_is_skipped_not_a_failure(tmp_path):
    from src.zoo.table import run_table

    _meas().iloc[[2]].to_parquet(tmp_path / "m.parquet")  # one timm CNN
    _gpus().to_parquet(tmp_path / "g.parquet")
    # Its static row from an earlier run (committed table) stays although nothing is recomputed now.
    pd.DataFrame({"model_key": ["resnet50"], "static_img_size": [224], "gmacs": [4.1]}).to_parquet(
        tmp_path / "s.parquet", index=False)
    s = run_table(tmp_path / "m.parquet", tmp_path / "g.parquet", tmp_path / "cache", tmp_path / "c.parquet",
                  tmp_path / "f.csv", tmp_path / "s.parquet", model_timeout_s=None, log=lambda _m: None)
    assert s["skipped_missing_extra"] == 1 and s["failures"] == 0 and s["not_computed"] == 1
    assert not list((tmp_path / "cache").rglob("failure.json"))
    named = pd.read_csv(tmp_path / "f.csv")  # not dropped silently: named, with the reason
    assert named[["model_key", "img_size", "stage", "error"]].values.tolist() == [
        ["resnet50", 224, "not_computed", "MissingZooExtra"]]
    assert "timm" in named["reason"].iloc[0]
    assert pd.read_parquet(tmp_path / "s.parquet")["gmacs"].tolist() == [4.1]


def test_each_measured_input_size_keeps_its_own_static_row(tmp_path):
    """MACs and activations depend on the resolution: a CNN measured at 224 and 288 px needs both rows (the features
    stage joins on model_key and size; one row per model_key used to drop every row at the other size)."""
    from src.zoo.table import run_table

    meas = _meas().iloc[[2, 2]].reset_index(drop=True)
    meas.loc[1, "img_size"] = 288
    meas.to_parquet(tmp_path / "m.parquet")
    _gpus().to_parquet(tmp_path / "g.parquet")
    pd.DataFrame({"model_key": ["resnet50", "resnet50", "resnet50"], "static_img_size": [288, 224, 320],
                  "gmacs": [6.8, 4.1, 8.3]}).to_parquet(tmp_path / "s.parquet", index=False)
    run_table(tmp_path / "m.parquet", tmp_path / "g.parquet", tmp_path / "cache", tmp_path / "c.parquet",
              tmp_path / "f.csv", tmp_path / "s.parquet", model_timeout_s=None, log=lambda _m: None)
    static = pd.read_parquet(tmp_path / "s.parquet")
    # both measured sizes, in canonical order; the 320-px row belongs to no measured row any more (with timm
    # installed the rows are recomputed: timm's resnet50 is 4.09 / 6.76 GMACs at 224 / 288 px)
    assert static["static_img_size"].tolist() == [224, 288]
    assert static["gmacs"].tolist() == pytest.approx([4.1, 6.8], rel=0.02)


def _stale_inputs(tmp_path):
    """inception_v3 measured with torchvision (whose definition the mapping picks), committed rows from timm's."""
    from pathlib import Path

    meas = pd.DataFrame({"model": ["inception_v3"], "model_key": ["inception_v3"], "model_source": ["torchvision"],
                         "img_size": [299], "batch_size": [1], "gpu": ["A"], "is_cpu": [False], "is_cnn": [True],
                         "gmacs": [5.7]})
    meas.to_parquet(tmp_path / "m.parquet")
    _gpus().to_parquet(tmp_path / "g.parquet")
    committed = Path(__file__).resolve().parents[2] / "data/processed/ptx_kernels.parquet"
    k = pd.read_parquet(committed)
    k = k.loc[(k["model_key"] == "inception_v3") & (k["img_size"] == 299) & (k["batch_size"] == 1)]
    k = k.assign(zoo_source="timm", zoo_model="inception_v3")  # an older mapping's definition
    k.to_parquet(tmp_path / "k.parquet", index=False)
    return k


def _run(tmp_path, **kw):
    from src.zoo.table import run_table

    return run_table(tmp_path / "m.parquet", tmp_path / "g.parquet", tmp_path / "cache", tmp_path / "c.parquet",
                     tmp_path / "f.csv", tmp_path / "s.parquet", out_kernels=tmp_path / "k.parquet",
                     model_timeout_s=None, log=lambda _m: None, nvcc_archs=["sm_75", "sm_120"], **kw)


def test_rows_of_another_definition_are_named_and_kept_when_nothing_is_computed(tmp_path):
    k = _stale_inputs(tmp_path)
    s = _run(tmp_path, offline_only=True)
    assert s["stale_definitions"] == ["torchvision__inception_v3__299"]
    counts = pd.read_parquet(tmp_path / "c.parquet")
    assert set(counts["zoo_source"]) == {"timm"} and len(counts) == 1
    assert counts["ptx_thread_instructions"].iloc[0] == pytest.approx(
        (k.loc[k["nvcc_arch"] == "sm_75", "thread_instructions"] * k.loc[k["nvcc_arch"] == "sm_75", "calls"]).sum())


def test_rows_of_the_current_definition_are_not_stale(tmp_path):
    k = _stale_inputs(tmp_path)
    k.assign(zoo_source="torchvision").to_parquet(tmp_path / "k.parquet", index=False)
    s = _run(tmp_path, offline_only=True)
    assert s["stale_definitions"] == [] and s["carried_from_table"] == 1


@pytest.mark.skipif(importlib.util.find_spec("timm") is not None, reason="needs an environment without the zoo")
def test_rows_of_another_definition_stay_when_this_environment_cannot_recompute(tmp_path):
    _stale_inputs(tmp_path)
    s = _run(tmp_path)
    assert s["stale_definitions"] == ["torchvision__inception_v3__299"] and s["failures"] == 0
    assert set(pd.read_parquet(tmp_path / "k.parquet")["zoo_source"]) == {"timm"}


def _result_from_rows(k: pd.DataFrame, batch: int, notes: dict) -> dict:
    """A stage result (as run_target returns it) holding the per-kernel rows `k`."""
    by_arch = {}
    for arch, rows in k.groupby("nvcc_arch"):
        per = [{"order": int(r["order"]), "kernel": r["kernel"], "kernel_digest": r["kernel_digest"],
                "operators": r["operators"], "grid": [int(r["grid_x"]), int(r["grid_y"]), int(r["grid_z"])],
                "block": [int(r["block_x"]), int(r["block_y"]), int(r["block_z"])], "calls": int(r["calls"]),
                "thread_instructions": int(r["thread_instructions"]) * batch,
                "warp_instructions": int(r["warp_instructions"]) * batch, "predicated_off": 0, "estimate": False,
                "by_class": {"fma": int(r["class_fma"]) * batch}, "bytes_by_space": {}}
               for _, r in rows.iterrows()]
        by_arch[arch] = {"ptx_arch": arch, "per_kernel": per}
    return {"source": "torchvision", "model": "inception_v3", "batch_size": batch, "seconds": 1.0,
            "zoo_version": "2", "by_arch": by_arch, "non_kernel_calls": notes}


def _measured_at_64_too(tmp_path) -> pd.DataFrame:
    """The committed inception_v3 rows under the current definition, measured at batch 1 and 64."""
    k = _stale_inputs(tmp_path).assign(zoo_source="torchvision")
    k.to_parquet(tmp_path / "k.parquet", index=False)
    meas = pd.read_parquet(tmp_path / "m.parquet")
    pd.concat([meas, meas.assign(batch_size=64)]).to_parquet(tmp_path / "m.parquet")
    return k


@pytest.mark.parametrize("notes, used", [({}, True), ({"schedule_without_matmul": 1}, False)])
def test_an_extra_batch_scheduled_with_a_module_wide_fallback_is_not_used(tmp_path, monkeypatch, notes, used):
    from src.zoo.plausibility import module_fallback
    from src.zoo.target_runner import TargetRunner

    k = _measured_at_64_too(tmp_path)
    asked = []

    def run(self, target, batch, *args, **kw):
        asked.append(batch)
        return _result_from_rows(k, batch, notes), {}, None

    monkeypatch.setattr(TargetRunner, "run", run)
    s = _run(tmp_path, extra_batches=[32])
    assert asked == [32] and module_fallback(_result_from_rows(k, 32, notes)) == ("" if used else "matmul")
    counts = pd.read_parquet(tmp_path / "c.parquet").set_index("batch_size")
    assert counts.loc[64, "count_method"] == ("proportional_b32" if used else "proportional_b1")
    assert sorted(set(pd.read_parquet(tmp_path / "k.parquet")["batch_size"])) == ([1, 32] if used else [1])
    assert [f["stage"] for f in s["extra_batch_failures"]] == ([] if used else ["schedule_fallback"])


def test_unused_extra_batches_are_written_and_not_retried_by_the_next_run(tmp_path, monkeypatch):
    import json

    from src.zoo.table import write_stage_reports
    from src.zoo.target_runner import TargetRunner

    _measured_at_64_too(tmp_path)
    calls = []

    def schedule_error(self, target, batch, *args, **kw):
        calls.append(batch)
        return None, {}, {"stage": "schedule", "error": "PtxGenerationError", "reason": "schedule: FloorDiv",
                          "seconds": 1.0}

    monkeypatch.setattr(TargetRunner, "run", schedule_error)
    fails, metric = tmp_path / "bf.csv", tmp_path / "summary.json"
    write_stage_reports(_run(tmp_path, extra_batches=[32]), fails, metric)
    written = pd.read_csv(fails)
    assert written[["model_key", "img_size", "batch_size", "stage"]].values.tolist() == [
        ["inception_v3", 299, 32, "schedule"]]
    summary = json.loads(metric.read_text())
    assert summary["extra_batch_failures"] == {"schedule": 1} and "median_seconds_per_model" not in summary
    assert summary["count_methods"] == {"compiled": 1, "proportional_b1": 1}
    assert summary["pairs_by_compiled_batch"] == {"1": 1} and "extra_batch_results" not in summary
    # the next run carries the failure instead of compiling again; --retry-failed compiles again
    s = _run(tmp_path, extra_batches=[32], prev_batch_failures=fails)
    assert calls == [32] and [f["stage"] for f in s["extra_batch_failures"]] == ["schedule"]
    _run(tmp_path, extra_batches=[32], prev_batch_failures=fails, retry_failed=True)
    assert calls == [32, 32]


@pytest.mark.parametrize("zoo_extra", [True, False])
def test_entries_of_the_module_wide_fallback_are_retried_where_the_zoo_can_compile(tmp_path, monkeypatch, zoo_extra):
    """A `schedule_fallback` entry came from the scheduling policy before functions were scheduled alone: the next
    run computes that batch again when it can, and keeps the entry when this environment lacks the zoo extra."""
    from src.zoo.failure_table import MISSING_EXTRA
    from src.zoo.target_runner import TargetRunner

    k = _measured_at_64_too(tmp_path)
    fails = tmp_path / "bf.csv"
    pd.DataFrame([{"model_key": "inception_v3", "img_size": 299, "batch_size": 32, "stage": "schedule_fallback",
                   "reason": "scheduled only with dlight's matmul rules dropped for the whole module"}]).to_csv(
        fails, index=False)
    calls = []

    def run(self, target, batch, *args, **kw):
        calls.append(batch)
        if not zoo_extra:
            return None, None, {"stage": MISSING_EXTRA, "error": "MissingFrameworkError", "reason": "no timm",
                                "seconds": 0.0}
        return _result_from_rows(k, batch, {"funcs_scheduled_without_matmul": 1}), {}, None

    monkeypatch.setattr(TargetRunner, "run", run)
    s = _run(tmp_path, extra_batches=[32], prev_batch_failures=fails)
    assert calls == [32]
    assert [f["stage"] for f in s["extra_batch_failures"]] == ([] if zoo_extra else ["schedule_fallback"])
    counts = pd.read_parquet(tmp_path / "c.parquet").set_index("batch_size")
    assert counts.loc[64, "count_method"] == ("proportional_b32" if zoo_extra else "proportional_b1")
    # offline, nothing is compiled and the entry stays
    s = _run(tmp_path, extra_batches=[32], prev_batch_failures=fails, offline_only=True)
    assert calls == [32]


@pytest.mark.parametrize("which", ["extra_batch", "stage_batch"])
def test_a_result_that_recomputes_the_cnn_is_not_used_and_says_why(tmp_path, monkeypatch, which):
    """dm_nfnet at batch 1: a schedule that recomputes the squeeze-excite convolution per output element counts
    ~100x the CNN's multiply-accumulates. Such a result prices no row; the failure names FMA/MAC and kernel."""
    from src.zoo.target_runner import TargetRunner

    k = _measured_at_64_too(tmp_path)
    b1 = k.loc[k["nvcc_arch"] == "sm_75"]
    fma_b1 = float((b1["class_fma"] * b1["calls"]).sum())
    # MACs per sample: the batch-1 counts are ~1 FMA per MAC; or 1/50 of them, so batch 1 recomputes 50x
    macs = fma_b1 if which == "extra_batch" else fma_b1 / 50
    pd.DataFrame({"model_key": ["inception_v3"], "static_img_size": [299], "macs": [macs],
                  "zoo_source": ["torchvision"], "zoo_model": ["inception_v3"]}).to_parquet(
        tmp_path / "s.parquet", index=False)
    heavy = k.assign(class_fma=k["class_fma"] * 50)  # the batch-32 result recomputes 50x

    def run(self, target, batch, *args, **kw):
        return _result_from_rows(heavy, batch, {}), {}, None

    monkeypatch.setattr(TargetRunner, "run", run)
    s = _run(tmp_path, extra_batches=[32])
    fails = pd.read_csv(tmp_path / "f.csv")
    if which == "extra_batch":
        counts = pd.read_parquet(tmp_path / "c.parquet").set_index("batch_size")
        assert counts.loc[64, "count_method"] == "proportional_b1" and len(fails) == 0
        [f] = s["extra_batch_failures"]
        assert (f["batch_size"], f["stage"]) == (32, "implausible")
        assert f["reason"].startswith("executes 50 FMAs per multiply-accumulate")
    else:
        assert not (tmp_path / "c.parquet").exists() or pd.read_parquet(tmp_path / "c.parquet").empty
        assert fails[["model_key", "img_size", "stage", "error"]].values.tolist() == [
            ["inception_v3", 299, "implausible", "RecomputingSchedule"]]
        assert fails.loc[0, "reason"].startswith("executes 50 FMAs") and "most in " in fails.loc[0, "reason"]
        assert len(pd.read_parquet(tmp_path / "k.parquet")) == 0
        assert s["extra_batch_failures"] == []  # the whole (CNN, size) failed: no second entry for batch 32


def test_a_target_not_compiled_is_named_and_retried_by_the_next_run(tmp_path):
    """Offline, a CNN without committed counts gets a failure-table row saying why it has none (stage
    not_computed); that row is not a failure: the next run that can compile (and warm) still take it up."""
    from src.zoo.committed_tables import previous_tables
    from src.zoo.failure_table import computed_failures
    from src.zoo.table import run_table

    _meas().iloc[[2]].to_parquet(tmp_path / "m.parquet")
    _gpus().to_parquet(tmp_path / "g.parquet")
    s = run_table(tmp_path / "m.parquet", tmp_path / "g.parquet", tmp_path / "cache", tmp_path / "c.parquet",
                  tmp_path / "f.csv", tmp_path / "s.parquet", offline_only=True, model_timeout_s=None,
                  log=lambda _m: None)
    assert s["failures"] == 0 and s["not_computed"] == 1
    assert s["failure_reasons"] == {"not_computed:OfflineOnly": 1}
    named = pd.read_csv(tmp_path / "f.csv")
    assert named[["model_key", "model_source", "img_size", "n_gpus", "stage", "error"]].values.tolist() == [
        ["resnet50", "timm", 224, 1, "not_computed", "OfflineOnly"]]
    assert "--offline-only" in named["reason"].iloc[0] and "src.zoo warm" in named["reason"].iloc[0]
    assert computed_failures(named).empty
    version = named["zoo_version"].astype(str).iloc[0]
    assert previous_tables(tmp_path / "c.parquet", tmp_path / "f.csv", tmp_path / "s.parquet", None,
                           version)[1].empty


def test_warm_still_targets_a_cnn_named_as_not_compiled(tmp_path):
    from src.zoo.failure_table import NOT_COMPUTED
    from src.zoo.warm import done_or_failed

    pd.DataFrame([{"model_key": "resnet50", "img_size": 224, "stage": NOT_COMPUTED, "error": "OfflineOnly"},
                  {"model_key": "vgg16", "img_size": 224, "stage": "build", "error": "UnknownModelError"}]
                 ).to_csv(tmp_path / "f.csv", index=False)
    assert done_or_failed(tmp_path / "k.parquet", tmp_path / "f.csv", 1, 1) == {("vgg16", 224)}
