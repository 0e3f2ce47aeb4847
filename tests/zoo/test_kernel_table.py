"""Per-kernel table checks on hand-made kernel rows (src/zoo/kernel_table.py)."""

from __future__ import annotations

import pandas as pd

from src.zoo.kernel_table import MAX_FMA_PER_MAC, implausible_results


def _rows(model_key: str, batch: int, kernels: list[tuple[str, int, int]], arch: str = "sm_75") -> pd.DataFrame:
    """Kernel rows of one result: (kernel name, FMAs per call, calls)."""
    return pd.DataFrame([{"model_key": model_key, "img_size": 224, "batch_size": batch, "nvcc_arch": arch,
                          "kernel": name, "class_fma": fma, "calls": calls} for name, fma, calls in kernels])


def test_a_result_recomputing_its_convolutions_is_named_with_its_kernel():
    macs = pd.DataFrame({"model_key": ["ok", "se", "unknown"], "img_size": [224, 224, 224], "macs": [1e6, 1e6, 0.0]})
    kernels = pd.concat([
        _rows("ok", 1, [("conv_kernel", 1_100_000, 1)]),            # 1.1 FMA per MAC: a count of the network
        _rows("ok", 32, [("conv_kernel", 1_000_000, 32)]),          # 1.0 at batch 32
        _rows("se", 1, [("conv_kernel", 1_000_000, 1), ("fused_conv2d_sigmoid_multiply_kernel", 49_000_000, 1)]),
        _rows("se", 1, [("conv_kernel", 1_000_000, 1)], arch="sm_120"),  # one arch recomputing is enough
        _rows("unknown", 1, [("conv_kernel", 1e12, 1)]),            # no MACs: not judged
    ], ignore_index=True)
    bad = implausible_results(kernels, macs)
    assert bad[["model_key", "img_size", "batch_size"]].values.tolist() == [["se", 224, 1]]
    assert bad.loc[0, "fma_per_mac"] == 50.0 > MAX_FMA_PER_MAC
    assert bad.loc[0, "worst_kernel"] == "fused_conv2d_sigmoid_multiply_kernel"


def test_the_limit_is_a_bound_not_a_rank():
    macs = pd.DataFrame({"model_key": ["a"], "img_size": [224], "macs": [1e6]})
    k = _rows("a", 1, [("k", 9_900_000, 1)])
    assert implausible_results(k, macs).empty
    assert len(implausible_results(k, macs, limit=9.0)) == 1
