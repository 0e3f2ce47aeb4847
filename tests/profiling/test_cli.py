"""`python -m src.profiling` end to end on the CPU: rows written and readable, failures kept, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from src.profiling.__main__ import main
from src.profiling.schema import read_own_csv

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).parent / "fixtures"
TINY = "py:tests.profiling.tinynets:tiny_cnn"


def test_run_command_writes_schema_rows(tmp_path: Path, capsys):
    out = tmp_path / "own" / "cpu_tiny.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "src.profiling", "run", "--models", TINY, "--batch-sizes", "1,2",
         "--precisions", "fp32,amp_bf16", "--layout", "nchw,nhwc", "--device", "cpu", "--warmup", "1",
         "--iters", "3", "--out", str(out), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "8 configuration(s) measured" in proc.stdout
    frame = read_own_csv(out)
    assert len(frame) == 8 and set(frame["source"]) == {"own"}
    assert set(frame["precision"]) == {"fp32", "amp_bf16"} and set(frame["memory_layout"]) == {"nchw", "nhwc"}
    assert set(frame["n_samples"]) == {3} and (frame["latency_ms"] > 0).all()
    assert not (out.parent / "cpu_tiny" / "failures.csv").exists()

    # a run never overwrites an earlier file silently
    assert main(["run", "--models", TINY, "--device", "cpu", "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err


def test_failures_are_recorded_and_the_rest_is_written(tmp_path: Path, capsys):
    out = tmp_path / "mixed.csv"
    rc = main(["run", "--models", f"{TINY},py:tests.profiling.tinynets:broken", "--batch-sizes", "2",
               "--device", "cpu", "--warmup", "0", "--iters", "2", "--out", str(out), "--no-progress", "--no-gmacs"])
    assert rc == 3
    assert len(read_own_csv(out)) == 1
    failures = (tmp_path / "mixed" / "failures.csv").read_text()
    assert "tinynets:broken" in failures and "expected input" in failures
    assert "FAILED" in capsys.readouterr().err


def test_time_budget_lists_configurations_not_started(tmp_path: Path, capsys):
    out = tmp_path / "boxed.csv"
    rc = main(["run", "--models", TINY, "--batch-sizes", "1,2,3", "--device", "cpu", "--warmup", "0",
               "--iters", "2", "--out", str(out), "--no-progress", "--no-gmacs", "--time-budget-s", "1e-9"])
    assert rc == 3
    assert not out.exists()  # the budget is spent before the first configuration starts
    failures = pd.read_csv(tmp_path / "boxed" / "failures.csv")
    assert failures.batch_size.tolist() == [1, 2, 3]
    assert set(failures.stage) == {"not_run"}
    assert failures.error.str.contains("time budget of 1e-09 s spent after 0 of 3").all()
    out_ok = tmp_path / "roomy.csv"
    assert main(["run", "--models", TINY, "--batch-sizes", "1,2", "--device", "cpu", "--warmup", "0", "--iters",
                 "2", "--out", str(out_ok), "--no-progress", "--no-gmacs", "--time-budget-s", "600"]) == 0
    assert len(read_own_csv(out_ok)) == 2
    assert main(["run", "--models", TINY, "--device", "cpu", "--out", str(tmp_path / "x.csv"),
                 "--time-budget-s", "0"]) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_gpu_is_a_clear_error(tmp_path: Path, capsys):
    rc = main(["run", "--models", TINY, "--device", "cuda", "--out", str(tmp_path / "x.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "torch.cuda.is_available() is False" in err
    assert not (tmp_path / "x.csv").exists()


def test_bad_arguments_are_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--models", TINY, "--precisions", "fp8", "--out", "x.csv"])
    assert "unknown value(s) ['fp8']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--models", TINY, "--batch-sizes", "0", "--out", "x.csv"])
    assert "argument --batch-sizes: batch sizes must be integers >= 1, got '0'" in capsys.readouterr().err


def test_ncu_without_ncu_binary_is_a_clear_error(tmp_path: Path, capsys):
    rc = main(["ncu", "--models", TINY, "--device", "cpu", "--ncu", str(tmp_path / "no-ncu"),
               "--out-dir", str(tmp_path / "n")])
    assert rc == 2 and "Nsight Compute (ncu) not found" in capsys.readouterr().err


def test_ncu_print_command(tmp_path: Path, capsys):
    rc = main(["ncu", "--models", TINY, "--batch-sizes", "8", "--compile", "compile", "--out-dir",
               str(tmp_path / "n"), "--print-command"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and len(lines) == 2
    assert "--clock-control none" in lines[0] and "--nvtx-include cnnperf_step/" in lines[0]
    assert "_target --model py:tests.profiling.tinynets:tiny_cnn --batch-size 8" in lines[0]
    assert "--compile torch_compile" in lines[0]
    assert "--import" in lines[1] and "--page details" in lines[1]


def test_parse_ncu_command(tmp_path: Path, capsys):
    rc = main(["parse-ncu", str(FIX / "ncu_details_h100_tinycnn.csv"), "--kernels-out", str(tmp_path / "k.csv")])
    out = capsys.readouterr().out
    assert rc == 0 and "3 kernel launch(es), long layout" in out and "ipc_active" in out
    assert len((tmp_path / "k.csv").read_text().splitlines()) == 4
    cut = tmp_path / "cut.csv"
    cut.write_text((FIX / "ncu_details_h100_tinycnn.csv").read_text()[:3000])
    rc = main(["parse-ncu", str(cut)])
    assert rc == 2 and f"{cut}:" in capsys.readouterr().err


def test_target_runs_one_marked_step_on_cpu(tmp_path: Path):
    info = tmp_path / "target.json"
    rc = main(["_target", "--model", TINY, "--batch-size", "2", "--device", "cpu", "--warmup", "1",
               "--info-out", str(info)])
    data = json.loads(info.read_text())
    assert rc == 0 and data["model"]["name"] == "tiny_cnn" and data["model"]["img_size"] == 32
    assert data["device"]["is_cpu"] is True and data["warmup_iters"] == 1
