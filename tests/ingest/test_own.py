"""Rows of our own profiler (data/own/*.csv) are one more source."""

import glob

import pandas as pd

from src.ingest.sources import own
from src.ingest.validate import validate

HEADER = "gpu,device_raw,model,batch_size,img_size,latency_ms,throughput,precision,mode,memory_layout\n"


def ingest_committed(pattern: str) -> pd.DataFrame:
    """Every committed own file matching `pattern`, parsed and validated: none may lose a row to quarantine."""
    frames = []
    for path in sorted(glob.glob(pattern)):
        result = own.parse_file(path, path)
        frame, quarantine = validate(result.rows)
        assert not quarantine and len(frame) == result.n_read, path
        frames.append(frame)
    assert frames, f"no committed file matches {pattern}"
    return pd.concat(frames)


def test_own_rows_resolve_and_validate(tmp_path):
    path = tmp_path / "h100.csv"
    path.write_text(
        HEADER
        + "NVIDIA H100 80GB HBM3,NVIDIA H100 80GB HBM3,resnet50,8,224,4.0,2000.0,amp_fp16,inference,nchw\n"
        + "cpu AMD EPYC 7742,cpu AMD EPYC 7742,resnet50,8,224,80.0,100.0,fp32,inference,nchw\n"
        + "NVIDIA H100 80GB HBM3,NVIDIA H100 80GB HBM3,resnet50,8,224,-1,2000.0,fp32,inference,nchw\n"
    )
    result = own.parse_file(path, "data/own/h100.csv")
    frame, quarantine = validate(result.rows)
    assert result.n_read == 3 and len(frame) == 2
    assert frame.iloc[0]["gpu"] == "H100 SXM5 80 GB" and frame.iloc[0]["family"] == "resnet"
    assert frame.iloc[1]["is_cpu"] and frame.iloc[1]["gpu"] == "cpu:AMD EPYC 7742"
    assert quarantine[0]["reason"] == "non-positive latency_ms: -1"


def test_own_file_missing_a_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("gpu,model\nNVIDIA H100 80GB HBM3,resnet50\n")
    result = own.parse_file(path, "data/own/bad.csv")
    assert result.quarantine[0]["reason"] == "missing column: batch_size"


def test_h200_cuda_graph_pairs_ingest_as_a_runtime():
    """The committed 2026-11-27 H200 run: every CNN timed eager and replayed from a CUDA graph, back to back."""
    rows = ingest_committed("data/own/h200_20261127_graphs_*.csv")
    assert set(rows["compile_mode"]) == {"eager", "cuda_graphs"} and set(rows["gpu"]) == {"H200 SXM 141 GB"}
    assert len(rows) == 508 and set(rows["batch_size"]) == {1}
    pairs = rows.pivot_table(index=["model_key", "precision"], columns="compile_mode", values="latency_ms").dropna()
    assert len(pairs) >= 235  # networks: names of one network (src/ingest/legacy_names.py) share a key
    # batch 1 eager is host-bound: the replay drops the per-operator dispatch, never the GPU work
    speedup = pairs["eager"] / pairs["cuda_graphs"]
    assert speedup.min() > 1.2 and 5 < speedup.median() < 9


def test_h100_rows_pair_with_the_h200_rows_of_the_same_configurations():
    """The committed 2026-11-27 H100 run repeats the H200 runs' configurations on a GPU with the same SMs and
    clocks but 0.70x the memory bandwidth: every row ingests as H100 SXM5 80 GB, and the same CNN is never
    faster on the H100 at batch 256, nor more than the bandwidth ratio slower, outside the launch-bound few."""
    h100 = ingest_committed("data/own/h100_20261127_*.csv")
    assert set(h100["gpu"]) == {"H100 SXM5 80 GB"} and len(h100) == 240
    assert h100.groupby(["precision", "batch_size", "compile_mode"]).size().to_dict() == {
        ("amp_fp16", 256, "eager"): 141, ("fp32", 1, "cuda_graphs"): 49, ("fp32", 1, "eager"): 50}
    h200 = ingest_committed("data/own/h200_20261126_infer_amp_fp16_bs256_*.csv")
    keys = ["model_source", "model"]  # as spelled: two names of one network share a model_key
    pairs = h100[h100["batch_size"] == 256].merge(h200, on=keys, suffixes=("_h100", "_h200"))
    assert len(pairs) == 141
    ratio = pairs["latency_ms_h100"] / pairs["latency_ms_h200"]
    assert ratio.min() > 1.0 and 1.05 < ratio.median() < 1.15 and (ratio < 1.43).mean() > 0.95


def test_h200_compile_triples_ingest_with_their_runtime():
    """The committed 2026-11-28 H200 run: the same CNN eager, torch.compile and graph-replayed at batch 1. At that
    batch Inductor's default mode still launches each kernel from the host: it beats eager by far less than a
    graph replay of eager's own (unfused) kernels does."""
    rows = ingest_committed("data/own/h200_20261128_compile_bs1_*.csv")
    assert len(rows) == 127 and set(rows["batch_size"]) == {1} and set(rows["gpu"]) == {"H200 SXM 141 GB"}
    assert rows.groupby("compile_mode").size().to_dict() == {"cuda_graphs": 40, "eager": 44, "torch_compile": 43}
    t = rows.pivot_table(index=["model_key", "precision"], columns="compile_mode", values="latency_ms")
    over_compile = (t["eager"] / t["torch_compile"]).dropna()
    over_graphs = (t["eager"] / t["cuda_graphs"]).dropna()
    assert len(over_compile) == 43 and len(over_graphs) == 40
    assert 1.2 < over_compile.median() < 1.8 and over_graphs.median() > 2.5 * over_compile.median()
    both = t[["torch_compile", "cuda_graphs"]].dropna()
    assert len(both) == 40 and (both["torch_compile"] > both["cuda_graphs"]).all()


def test_h200_batch_sweep_shows_the_host_bound_plateau_and_pure_fp16_equal_to_amp():
    """The committed 2026-11-30 H200 run: 21 CNNs at batch 2, 8, 32 and 128 in fp32, AMP fp16 and pure fp16, and
    training steps at batch 64. Eager inference stays on the host's plateau up to batch 8 (where AMP's per-op casts
    make it slower than fp32) and is tensor-core bound by batch 128 (AMP faster than fp32); pure fp16 costs what
    AMP costs at every batch."""
    sweep = ingest_committed("data/own/h200_20261130_sweep_infer_bs2_128_*.csv")
    assert len(sweep) == 260 and set(sweep["gpu"]) == {"H200 SXM 141 GB"} and sweep["model_key"].nunique() == 21
    assert set(sweep["batch_size"]) == {2, 8, 32, 128} and set(sweep["compile_mode"]) == {"eager"}
    assert sweep.groupby("precision").size().to_dict() == {"amp_fp16": 88, "fp16": 84, "fp32": 88}
    t = sweep.groupby(["model_key", "batch_size", "precision"])["latency_ms"].median().unstack()
    at = {b: t.xs(b, level="batch_size") for b in (2, 8, 32, 128)}
    assert 0.9 < (at[8]["fp32"] / at[2]["fp32"]).median() < 1.15  # the plateau: four times the work, same time
    assert (at[2]["amp_fp16"] / at[2]["fp32"]).median() > 1.1
    faster = at[128]["amp_fp16"] / at[128]["fp32"]
    assert faster.median() < 0.8 and (faster < 1).mean() > 0.85
    for b in (2, 8, 32, 128):
        assert 0.95 < (at[b]["fp16"] / at[b]["amp_fp16"]).median() < 1.05, b
    train = ingest_committed("data/own/h200_20261130_train_*.csv")
    assert len(train) == 13 and set(train["mode"]) == {"training"} and set(train["batch_size"]) == {64}
