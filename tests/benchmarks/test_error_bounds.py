"""The oracle bounds of benchmarks/error_bounds.py on small frames worked by hand."""

import sys

import numpy as np
import pandas as pd
import pytest

from src.config import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from error_bounds import by_layout, operator_classes, oracle_mape, twin_floor, with_config  # noqa: E402


def test_a_group_offset_is_removed_whole_and_the_spread_inside_it_stays():
    # family a: every prediction 2x too slow (one offset); family b: 10 % above and 10 % below its median (0)
    frame = pd.DataFrame({"family": ["a", "a", "b", "b"], "measured": [1.0, 2.0, 1.0, 1.0],
                          "predicted": [2.0, 4.0, 1.1, 1.0 / 1.1]})
    assert oracle_mape(frame, ["family"]) == pytest.approx(np.mean([0, 0, 10.0, 100 * (1 - 1 / 1.1)]))
    # one group over everything: the median log error is 0.5 x log 2 + ..., so no row is exact any more
    assert oracle_mape(frame, ["measured"]) > 0


def test_twin_floor_scores_each_row_against_its_configurations_median():
    cfg = {"model_key": "m", "gpu": "g", "batch_size": 1, "img_size": 224, "precision": "fp32", "mode": "inference",
           "memory_layout": "nchw", "compile_mode": "eager", "framework": "pytorch"}
    rows = [dict(cfg, source="s", target=t) for t in (1.0, 1.0, 1.3)] + [dict(cfg, source="s", gpu="h", target=5.0)]
    floor = twin_floor(pd.DataFrame(rows)).set_index("source")
    assert floor.loc["s", "twin_rows"] == 3  # the lone row of GPU h has no twin
    assert floor.loc["s", "twin_floor_mape"] == pytest.approx(10.0)


def test_predictions_missing_from_the_dataset_are_named():
    dataset = pd.DataFrame({"measurement_id": ["x:1"], "source": ["x"], "family": ["f"]})
    pred = pd.DataFrame({"measurement_id": ["x:1", "y:9"], "measured": [1.0, 1.0], "predicted": [1.0, 1.0]})
    with pytest.raises(ValueError, match="y:9"):
        with_config(pred, dataset)


def test_operator_classes_from_the_forward_layers():
    def op(model, kind, macs, name="convolution.default", p="forward"):
        return {"model_key": model, "pass": p, "op": name, "kind": kind, "macs_per_sample": macs}

    layers = pd.DataFrame([
        op("gn", "conv", 100.0), op("gn", "norm", 0.0, "native_group_norm.default"),
        op("resnext", "conv", 90.0), op("resnext", "grouped_conv", 10.0),
        op("mobilenet", "conv", 98.0), op("mobilenet", "depthwise_conv", 2.0),
        op("vgg", "conv", 100.0), op("vgg", "grouped_conv", 100.0, p="backward"),  # only the forward pass counts
        op("almost", "conv", 96.0), op("almost", "grouped_conv", 4.0),  # under 5 % grouped: dense
    ])
    assert operator_classes(layers).to_dict() == {"almost": "dense", "gn": "group_norm", "mobilenet": "depthwise",
                                                  "resnext": "grouped_conv", "vgg": "dense"}


def test_by_layout_pools_rows_per_layout_and_class():
    pred = pd.DataFrame({"model_key": ["a", "a", "b", "zzz"], "source": "timm", "framework_version": "1.10",
                         "memory_layout": ["nchw", "nhwc", "nhwc", "nhwc"], "measured": 1.0,
                         "predicted": [1.1, 2.0, 0.5, 1.0]})
    t = by_layout("p", pred, pd.Series({"a": "dense", "b": "dense"})).set_index(["memory_layout",
                                                                                   "operator_class"])
    assert t.loc[("nhwc", "dense"), "rows"] == 2 and t.loc[("nhwc", "dense"), "mape"] == pytest.approx(75.0)
    assert t.loc[("nchw", "dense"), "mape"] == pytest.approx(10.0)
    assert t.loc[("nhwc", "no_layers"), "rows"] == 1  # a CNN without a layer table is kept, named as such
