"""ncu CSV parsing: both layouts, base units, per-network sums, and every kind of damage is an error.

The two report fixtures are hand-written from ncu's documented CSV layouts (see fixtures/README.md); they keep the
wide layout and the damage cases covered. Real reports from an H200 are tested in test_real_h200.py.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from src.profiling.ncu import (
    NCU_METRICS,
    NVTX_RANGE,
    NcuReportError,
    import_command,
    kernels_table,
    ncu_command,
    parse_ncu_csv,
    read_ncu_csv,
    summarize_network,
)

FIX = Path(__file__).parent / "fixtures"
DETAILS = FIX / "ncu_details_h100_tinycnn.csv"
RAW = FIX / "ncu_raw_h100_tinycnn.csv"
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(launch: int, metric: str, unit: str, value: str, kernel: str = "k(float*)") -> str:
    return (f'"{launch}","1","python","h","{kernel}","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


def test_details_layout_parses_in_base_units():
    report = read_ncu_csv(DETAILS, required=NCU_METRICS)
    k = report.kernels
    assert report.layout == "long" and len(k) == 3
    assert list(k["launch_id"]) == [0, 1, 2]
    assert k.loc[0, "kernel_name"].startswith("void at::native::vectorized_elementwise_kernel<4,")
    assert k.loc[0, "dram__bytes_write.sum"] == 2_408_448  # "2,408,448" in the file
    assert k.loc[1, "grid_size"] == "(64, 2, 1)" and k.loc[1, "cc"] == "9.0"
    assert report.units["gpu__time_duration.sum"] == "nsecond" and report.units["sm__inst_executed.sum"] == "inst"
    assert report.notes[0].startswith("==PROF== Connected to process")


def test_raw_layout_gives_the_same_launches():
    long = kernels_table(read_ncu_csv(DETAILS, required=NCU_METRICS))
    wide = kernels_table(read_ncu_csv(RAW, required=NCU_METRICS))
    assert read_ncu_csv(RAW).layout == "wide"
    metrics = list(NCU_METRICS)
    pd.testing.assert_frame_equal(long[metrics].reset_index(drop=True), wide[metrics].reset_index(drop=True))
    assert list(long["kernel_name"]) == list(wide["kernel_name"])


def test_per_kernel_ipc_is_instructions_over_active_cycles():
    k = read_ncu_csv(DETAILS, required=NCU_METRICS).kernels
    recomputed = k["sm__inst_executed.sum"] / k["sm__cycles_active.sum"]
    assert (recomputed - k["sm__inst_executed.avg.per_cycle_active"]).abs().max() < 0.006  # printed to 2 decimals


def test_network_summary_sums_and_weights():
    k = read_ncu_csv(DETAILS, required=NCU_METRICS).kernels
    s = summarize_network(k)
    assert s["kernel_launches"] == 3 and s["distinct_kernels"] == 3
    assert s["warp_inst_executed_sum"] == 225_792 + 5_312_512 + 1_105_920
    assert s["sm_active_cycles_sum"] == 663_432 + 7_652_244 + 1_802_196
    assert s["ipc_active"] == pytest.approx(s["warp_inst_executed_sum"] / s["sm_active_cycles_sum"])
    assert s["gpu_time_ms_sum"] == pytest.approx((4_544 + 38_752 + 9_120) / 1e6)
    assert s["dram_bytes_sum"] == s["dram_bytes_read_sum"] + s["dram_bytes_write_sum"] == 14_843_904 + 19_189_760
    weights = k["sm__cycles_active.sum"]
    expected_occ = (k["sm__warps_active.avg.pct_of_peak_sustained_active"] * weights).sum() / weights.sum()
    assert s["achieved_occupancy_pct"] == pytest.approx(expected_occ)
    assert min(k["sm__warps_active.avg.pct_of_peak_sustained_active"]) < s["achieved_occupancy_pct"] < 100


def test_truncated_mid_line_names_file_and_line(tmp_path: Path):
    text = DETAILS.read_text()
    cut = text[: text.index('"sm__inst_executed.sum"', text.index('"2","48213"')) + 10]
    bad = tmp_path / "cut.csv"
    bad.write_text(cut)
    line = cut.count("\n") + 1
    with pytest.raises(NcuReportError, match=rf"cut.csv:{line}: "):
        read_ncu_csv(bad, required=NCU_METRICS)


def test_truncated_at_a_line_boundary_reports_the_missing_metric(tmp_path: Path):
    lines = DETAILS.read_text().splitlines()
    bad = tmp_path / "short.csv"
    bad.write_text("\n".join(lines[:-3]) + "\n")  # the last launch loses its last three metrics
    with pytest.raises(NcuReportError, match=r"short.csv:\d+: launch 2 \(void cudnn::bn_fw_inf.*has no value for"):
        read_ncu_csv(bad, required=NCU_METRICS)
    # without a required list, launches must still agree with each other
    with pytest.raises(NcuReportError, match="launch 2"):
        read_ncu_csv(bad)


def test_ncu_errors_and_missing_header_are_errors():
    with pytest.raises(NcuReportError, match=r"<string>:2: ncu reported an error: ==ERROR== ERR_NVGPUCTRPERM"):
        parse_ncu_csv("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - no permission\n")
    with pytest.raises(NcuReportError, match="no ncu CSV header"):
        parse_ncu_csv("==PROF== Connected to process 1\n")
    with pytest.raises(NcuReportError, match="holds no kernel launches"):
        parse_ncu_csv(HEADER + "\n")
    with pytest.raises(NcuReportError, match=r"<string>:3: ncu reported an error"):
        parse_ncu_csv(HEADER + "\n" + row(0, "gpu__time_duration.sum", "nsecond", "5") + "\n==ERROR== crashed\n")


@pytest.mark.parametrize("value", ["65,77", "27.595.520", "abc", ""])
def test_non_numbers_are_errors_not_zeros(value):
    text = "\n".join([HEADER, row(0, "gpu__time_duration.sum", "nsecond", "10"),
                      row(0, "dram__bytes.sum", "byte", value)])
    with pytest.raises(NcuReportError, match=r"<string>:3: dram__bytes.sum: not a number"):
        parse_ncu_csv(text)


def test_na_values_are_missing_not_zero():
    text = "\n".join([HEADER, row(0, "gpu__time_duration.sum", "nsecond", "10"), row(0, "dram__bytes.sum", "", "n/a")])
    with pytest.raises(NcuReportError, match=r"has no value for 'dram__bytes.sum'"):
        parse_ncu_csv(text)


def test_scaled_units_are_converted_to_base_units():
    text = "\n".join([HEADER, row(0, "gpu__time_duration.sum", "usecond", "12.5"),
                      row(0, "dram__bytes.sum", "Mbyte", "2.5"),
                      row(1, "gpu__time_duration.sum", "nsecond", "1,000"), row(1, "dram__bytes.sum", "Kbyte", "640")])
    k = parse_ncu_csv(text).kernels
    assert list(k["gpu__time_duration.sum"]) == [12_500.0, 1_000.0]
    assert list(k["dram__bytes.sum"]) == [2_500_000.0, 640_000.0]


def test_duplicates_and_inconsistent_rows_are_errors():
    twice = "\n".join([HEADER, row(0, "gpu__time_duration.sum", "nsecond", "1"),
                       row(0, "gpu__time_duration.sum", "nsecond", "2")])
    with pytest.raises(NcuReportError, match=r"<string>:3: metric 'gpu__time_duration.sum' of launch 0 already given"):
        parse_ncu_csv(twice)
    renamed = "\n".join([HEADER, row(0, "a__x.sum", "", "1"), row(0, "b__y.sum", "", "2", kernel="other")])
    with pytest.raises(NcuReportError, match=r"<string>:3: launch 0 is 'k\(float\*\)' on line 2 but 'other' here"):
        parse_ncu_csv(renamed)
    short = HEADER + "\n" + '"0","1","python"\n'
    with pytest.raises(NcuReportError, match=r"<string>:2: expected 15 fields, got 3"):
        parse_ncu_csv(short)


def test_the_launched_command_pins_clocks_metrics_and_range(tmp_path: Path):
    cmd = ncu_command("/opt/ncu", tmp_path / "rep", ["python", "-m", "src.profiling", "_target"])
    assert cmd[0] == "/opt/ncu"
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(NCU_METRICS)
    assert cmd[cmd.index("--nvtx-include") + 1] == f"{NVTX_RANGE}/" and "--nvtx" in cmd
    assert cmd[-4:] == ["python", "-m", "src.profiling", "_target"]
    imp = import_command("/opt/ncu", tmp_path / "rep.ncu-rep")
    assert imp[imp.index("--page") + 1] == "details" and imp[imp.index("--print-units") + 1] == "base"
