"""The PTX lookup inside the Pipeline gives back the `ptx` stage's counts for any (CNN, size, batch, GPU)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from src.config import REPO_ROOT
from src.features.ptx_lookup import PtxIndex, PtxTableError, cc_arch_number, load_ptx_index, ptx_count_columns

TABLE = REPO_ROOT / "data" / "processed" / "ptx_counts.parquet"


@pytest.fixture(scope="module")
def counts() -> pd.DataFrame:
    """Real rows of the committed table: two CNNs, every (batch, cc) they were measured at."""
    table = pd.read_parquet(TABLE)
    return table[table["model_key"].isin(["resnet50", "densenet121"])].reset_index(drop=True)


def index_of(counts: pd.DataFrame) -> PtxIndex:
    return PtxIndex(counts, ptx_count_columns(counts.columns), sorted(counts["nvcc_arch"].unique()))


def test_lookup_gives_back_every_row_of_the_stage(counts):
    idx = index_of(counts)
    got = idx.lookup(counts)
    np.testing.assert_allclose(got, counts[idx.columns].to_numpy(dtype=float), rtol=1e-12)


def test_the_whole_committed_table_is_reproduced():
    table = pd.read_parquet(TABLE)
    idx = load_ptx_index(str(TABLE))
    np.testing.assert_allclose(idx.lookup(table), table[idx.columns].to_numpy(dtype=float), rtol=1e-12)


def test_arch_and_batch_rules(counts):
    idx = index_of(counts)
    col = idx.columns.index("ptx_thread_instructions")
    one = counts[(counts["model_key"] == "resnet50") & (counts["img_size"] == 224)]
    ada = one[one["nvcc_arch"] == "sm_75"].iloc[0]
    blackwell = one[one["nvcc_arch"] == "sm_120"].iloc[0]
    per_sample = {a: r["ptx_thread_instructions"] / r["batch_size"] for a, r in (("75", ada), ("120", blackwell))}
    assert per_sample["75"] != per_sample["120"]  # the two PTX archs really count differently
    ask = pd.DataFrame({"model_key": ["resnet50"] * 4, "img_size": [224] * 4, "batch_size": [3, 3, 3, 3],
                        # A100 (8.0), H100 (9.0: no sm_90 PTX, sm_75 stands for it), RTX 5090 (12.0), RTX PRO 6000
                        # Blackwell's cc 12.0 again; none of these batch sizes was measured
                        "compute_capability": [8.0, 9.0, 12.0, 12.0]})
    got = idx.lookup(ask)[:, col]
    np.testing.assert_allclose(got, [3 * per_sample["75"]] * 2 + [3 * per_sample["120"]] * 2, rtol=1e-12)
    launches = idx.lookup(ask)[:, idx.columns.index("ptx_launches")]
    assert (launches == ada["ptx_launches"]).all()  # per step, not scaled with the batch


def test_a_cnn_counted_for_one_arch_falls_back_to_it(counts):
    only_75 = counts[counts["nvcc_arch"] == "sm_75"]
    idx = PtxIndex(only_75, ptx_count_columns(counts.columns), ["sm_75", "sm_120"])
    ask = {"model_key": np.array(["resnet50"]), "img_size": np.array([224]), "batch_size": np.array([1.0]),
           "compute_capability": np.array([12.0])}
    assert np.isfinite(idx.lookup(ask)).all()


def test_never_counted_cnn_is_nan_then_imputed_from_gmacs(counts):
    idx = index_of(counts)
    train = counts.assign(gmacs=4.1)
    per = idx.per_gmac(train)
    ask = {"model_key": np.array(["resnet50", "my_cnn"]), "img_size": np.array([224, 224]),
           "batch_size": np.array([2.0, 2.0]), "compute_capability": np.array([8.6, 8.6]),
           "gmacs": np.array([4.1, 8.2])}
    assert np.isnan(idx.lookup(ask)[1]).all() and np.isfinite(idx.lookup(ask)[0]).all()
    got, counted = idx.counts(ask, per)
    assert list(counted) == [True, False]
    np.testing.assert_array_equal(got[0], idx.lookup(ask)[0])
    col = idx.columns.index("ptx_thread_instructions")
    assert got[1, col] == pytest.approx(per[col] * 8.2 * 2)
    assert got[1, idx.columns.index("ptx_launches")] == per[idx.columns.index("ptx_launches")]
    assert list(idx.has(ask["model_key"], ask["img_size"])) == [True, False]


def test_bad_tables_are_refused(counts):
    with pytest.raises(PtxTableError, match="lacks column"):
        PtxIndex(counts.drop(columns=["count_method"]), ptx_count_columns(counts.columns), ["sm_75"])
    bad = counts.copy()
    bad.loc[0, "count_method"] = "guessed"
    with pytest.raises(PtxTableError, match="row 0: unknown count_method 'guessed'"):
        PtxIndex(bad, ptx_count_columns(counts.columns), ["sm_75"])
    clash = counts.copy()
    mine = (clash["model_key"] == "resnet50") & (clash["img_size"] == 224) & (clash["nvcc_arch"] == "sm_75")
    twin = clash[mine].index[:2]
    clash.loc[twin[1], "ptx_thread_instructions"] *= 1.5
    with pytest.raises(PtxTableError, match="differ between batch sizes"):
        PtxIndex(clash, ptx_count_columns(counts.columns), ["sm_75"])


def test_cc_to_arch_number():
    assert list(cc_arch_number(np.array([6.1, 7.5, 8.6, 12.0]))) == [61, 75, 86, 120]


def test_two_compiled_batches_scale_from_the_largest_not_above(counts):
    """With batch 1 and batch 32 compiled (ptx.extra_batches: [32]), batch 16 scales from 1, batch 64 from 32, and
    a batch below every compiled one from the smallest; rows of another CNN keep their own single batch."""
    one = counts[(counts["model_key"] == "resnet50") & (counts["img_size"] == 224) & (counts["nvcc_arch"] == "sm_75")]
    b1 = one[one["batch_size"] == 1].iloc[[0]].copy()
    b1["count_method"] = "compiled"
    b32 = b1.copy()
    cols = ptx_count_columns(counts.columns)
    b32["batch_size"] = 32
    b32["count_method"] = "compiled"
    for c in cols:
        b32[c] = b1[c] * (1 if c in ("ptx_kernels", "ptx_launches") else 30.0)  # per-sample counts level off
    other = counts[(counts["model_key"] == "densenet121") & (counts["nvcc_arch"] == "sm_75")]
    idx = PtxIndex(pd.concat([b1, b32, other]), cols, ["sm_75"])
    col = idx.columns.index("ptx_thread_instructions")
    base = float(b1["ptx_thread_instructions"].iloc[0])
    ask = pd.DataFrame({"model_key": ["resnet50"] * 4 + ["densenet121"], "img_size": [224] * 5,
                        "batch_size": [16.0, 32.0, 64.0, 0.5, 8.0], "compute_capability": [8.6] * 5})
    got = idx.lookup(ask)[:, col]
    dense = other[other["batch_size"] == other["batch_size"].min()].iloc[0]
    dense_per_sample = dense["ptx_thread_instructions"] / dense["batch_size"]
    np.testing.assert_allclose(got, [16 * base, 30 * base, 60 * base, 0.5 * base, 8 * dense_per_sample], rtol=1e-12)


def test_rows_without_a_size_batch_or_gpu_are_refused(counts):
    idx = index_of(counts)
    ask = {"model_key": np.array(["resnet50", "resnet50"]), "img_size": np.array([224, 224]),
           "batch_size": np.array([1.0, np.nan]), "compute_capability": np.array([8.6, 8.6])}
    with pytest.raises(ValueError, match=r"batch_size is missing or not finite in row\(s\) \[1\]"):
        idx.lookup(ask)
