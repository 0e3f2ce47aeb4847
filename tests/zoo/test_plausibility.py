"""Whether a result counts the CNN (src/zoo/plausibility.py): the rules that decide when the gate variant is
compiled. Pure, always run."""

from __future__ import annotations

import pandas as pd

from src.zoo.kernel_table import MAX_FMA_PER_MAC
from src.zoo.pipeline import MATERIALISED_GATES
from src.zoo.plausibility import fma_per_mac, recomputes_gates, recomputing_pairs


def _result(fma: float, batch: int = 1, variant: str | None = None) -> dict:
    r = {"batch_size": batch,
         "by_arch": {"sm_75": {"by_class": {"fma": fma}}, "sm_120": {"by_class": {"fma": 0.9 * fma}}}}
    if variant:
        r["schedule_variant"] = variant
    return r


def test_a_default_result_with_too_many_fmas_per_mac_is_compiled_again_as_the_variant():
    static = {"macs": 1e9}
    assert fma_per_mac(_result(2.4e9, batch=2), static) == 1.2  # per sample, the most over the archs
    assert not recomputes_gates(_result(1.2e9), static)
    assert recomputes_gates(_result((MAX_FMA_PER_MAC + 1) * 1e9), static)
    # a variant is judged by the table (`implausible_results`), never compiled again
    assert not recomputes_gates(_result(246e9, variant=MATERIALISED_GATES), static)
    # without the CNN's MACs nothing is judged
    assert fma_per_mac(_result(246e9), None) is None and not recomputes_gates(_result(246e9), {"macs": 0})


def test_pairs_the_failure_table_lists_as_recomputing_are_compiled_as_the_variant_first(tmp_path):
    path = tmp_path / "ptx_failures.csv"
    assert recomputing_pairs(path) == set()
    pd.DataFrame([
        {"model_key": "dm_nfnet_f0", "img_size": 192, "stage": "implausible", "error": "RecomputingSchedule"},
        {"model_key": "dm_nfnet_f0", "img_size": 256, "stage": "implausible", "error": "RecomputingSchedule"},
        {"model_key": "convnext_tiny_hnfd", "img_size": 224, "stage": "build", "error": "UnknownModelError"},
    ]).to_csv(path, index=False)
    assert recomputing_pairs(path) == {("dm_nfnet_f0", 192), ("dm_nfnet_f0", 256)}
