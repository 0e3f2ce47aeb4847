"""Noise-floor estimates by hand: repeats within a source, and agreement between layer sources."""

import pandas as pd
import pytest

from src.ingest.noise import indistinguishable_by_source, layer_noise_floor, repeats_by_source


def _row(source, gpu, latency, **kw):
    base = {"source": source, "gpu": gpu, "is_cpu": False, "framework": "tensorrt", "model_key": "resnet50",
            "batch_size": 1, "img_size": 224, "precision": "int8", "mode": "inference", "compile_mode": "tensorrt",
            "memory_layout": "nchw", "scenario": "single_stream", "latency_ms": latency}
    return {**base, **kw}


def test_repeats_by_source_pairs_rows_of_one_configuration():
    frame = pd.DataFrame([
        _row("mlperf", "L4", 1.0), _row("mlperf", "L4", 2.0),  # one configuration, two submissions
        _row("mlperf", "T4", 3.0),  # alone: no pair
        _row("mlperf", "L4", 9.0, batch_size=8),  # another configuration
        _row("timm", "L4", 5.0, framework="pytorch"),
    ])
    got = repeats_by_source(frame)
    # ordered pairs (1, 2) and (2, 1): |1-2|/2 = 50 %, |2-1|/1 = 100 %
    assert got["mlperf"]["n"] == 2 and got["mlperf"]["configurations"] == 1
    assert got["mlperf"]["mean_pct"] == pytest.approx(75.0)
    assert got["timm"] == {"n": 0}


def test_indistinguishable_rows_that_disagree_are_counted_per_source():
    frame = pd.DataFrame([
        _row("jc", "L4", 1.0, framework_version=""), _row("jc", "L4", 3.0, framework_version=""),  # 3x: a conflict
        _row("jc", "L4", 1.1, framework_version="", batch_size=8), _row("jc", "L4", 1.2, framework_version="",
                                                                         batch_size=8),  # 1.09x: noise
        _row("jc", "L4", 9.0, framework_version="nn"),  # told apart by its release
        _row("jc", "T4", 2.0, framework_version="", scenario="offline"),
        _row("jc", "T4", 5.0, framework_version="", scenario="server"),  # the scenario is not a model input
        _row("timm", "L4", 5.0, framework="pytorch", framework_version="2.4.0"),
    ])
    got = indistinguishable_by_source(frame)
    assert got["jc"] == {"rows": 7, "shared_rows": 6, "groups": 3, "conflict_groups": 2, "conflict_rows": 4,
                         "conflict_share": pytest.approx(4 / 7), "conflict_median_ratio": pytest.approx(2.75)}
    assert got["timm"]["groups"] == 0 and got["timm"]["conflict_median_ratio"] is None


def test_layer_sources_compared_on_similar_layers_only():
    shape = {"op": "conv_fwd", "precision": "fp32", "n": 1, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3,
             "stride_h": 1, "stride_w": 1, "pad_h": 1, "pad_w": 1, "dilation_h": 1, "dilation_w": 1, "groups": 1,
             "flops": 2.0e8, "bytes_total": 1.0e6}
    layers = pd.DataFrame([
        {**shape, "gpu": "Tesla T4", "source": "neusight", "latency_ms": 1.0},
        {**shape, "gpu": "Tesla T4", "source": "deepbench", "latency_ms": 0.5, "n": 2, "flops": 2.4e8},
        {**shape, "gpu": "Tesla P4", "source": "deepbench", "latency_ms": 0.5},
    ])
    got = layer_noise_floor(layers)
    assert got["exact_shapes_shared"] == 0  # the T4 shapes differ in n
    sim = got["similar_layers"]  # same octave of FLOPs and intensity: achieved 2e8/1.0 vs 2.4e8/0.5 FLOP/ms
    assert sim["n"] == 2 and set(sim["per_gpu"]) == {"Tesla T4"}
    assert sim["per_source_pair"]["neusight vs deepbench"]["mean_pct"] == pytest.approx(abs(2.0 - 4.8) / 4.8 * 100)
