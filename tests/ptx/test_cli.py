"""`python -m src.ptx count ...` in a subprocess, as later checks call it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import O3, edit, vector_add_ptx

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "src.ptx", "count", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_json_output_has_the_contract_fields():
    p = run(str(O3), "--kernel", "vector_add", "--grid", "4", "--block", "256", "--param",
            "vector_add_param_3=1000", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    for key in ("thread_instructions", "warp_instructions", "predicated_off", "by_class", "estimate", "seconds"):
        assert key in d
    assert d["thread_instructions"] == 11 * 1024 + 11 * 1000 and d["estimate"] is False
    assert d["grid"] == [4, 1, 1] and d["by_class"]["load.global"] == 2000


def test_two_dimensional_launch_and_param_by_index():
    p = run(str(O3), "--kernel", "stencil2d", "--grid", "3,2", "--block", "8,8,1", "--param", "2=20",
            "--param", "3=13", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["block"] == [8, 8, 1]


def test_without_kernel_lists_kernels_and_parameters():
    p = run(str(O3))
    assert p.returncode == 0
    assert "vector_add(0:vector_add_param_0 .u64" in p.stdout
    p = run(str(O3), "--json")
    kernels = json.loads(p.stdout)["kernels"]
    assert len(kernels) == 13 and kernels["grid_stride"][2] == {"name": "grid_stride_param_2", "type": ".f32"}


def test_data_dependent_branch_exit_code_and_policy():
    p = run(str(O3), "--kernel", "data_branch", "--grid", "2", "--block", "64", "--param", "2=100")
    assert p.returncode == 3 and "ld.global.f32" in p.stderr
    p = run(str(O3), "--kernel", "data_branch", "--grid", "2", "--block", "64", "--param", "2=100",
            "--policy", "bounds", "--json")
    d = json.loads(p.stdout)
    assert d["estimate"] is True and d["unresolved_branches"] and d["bounds"]["upper"]["thread_instructions"] > \
        d["thread_instructions"]


def test_malformed_file_gives_line_numbered_error(tmp_path):
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_80\n.entry k()\n{\n  mov.u32 %r1 5;\n}\n")
    p = run(str(bad), "--kernel", "k", "--grid", "1", "--block", "1")
    assert p.returncode == 2
    assert f"{bad}:5:" in p.stderr and "mov.u32 %r1 5;" in p.stderr


def test_bad_dims_rejected():
    p = run(str(O3), "--kernel", "vector_add", "--grid", "0", "--block", "32")
    assert p.returncode == 2 and "positive" in p.stderr


VA = ["--kernel", "vector_add", "--grid", "4", "--block", "256"]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("4294968296", "out of range"), ("99999999999", "out of range"), ("1.5", "not an integer"),
     ("1000.9", "not an integer"), ("nan", "not an integer"), ("inf", "not an integer")],
)
def test_bad_param_values_are_errors_naming_the_parameter_and_type(value, fragment):
    p = run(str(O3), *VA, "--param", f"3={value}")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("error: parameter vector_add_param_3 (.u32): ") and fragment in p.stderr


def test_param_given_twice_is_an_error():
    p = run(str(O3), *VA, "--param", "3=1000", "--param", "3=5")
    assert p.returncode == 2 and "--param 3 given twice" in p.stderr
    p = run(str(O3), *VA, "--param", "3=1000", "--param", "vector_add_param_3=5")
    assert p.returncode == 2 and "vector_add_param_3 given twice" in p.stderr


def test_unknown_kernel_message_has_no_stray_quotes():
    p = run(str(O3), "--kernel", "nope", "--grid", "1", "--block", "1")
    assert p.returncode == 2
    assert p.stderr.startswith("error: kernel 'nope' not in module (kernels: [")


@pytest.mark.parametrize(("grid", "limit"), [("1,70000", "65535"), ("1,1,100000", "65535"),
                                             ("2147483648", "2147483647")])
def test_grid_beyond_cuda_limits_is_rejected_at_once(grid, limit):
    p = run(str(O3), "--kernel", "vector_add", "--grid", grid, "--block", "256", "--param", "3=1000")
    assert p.returncode == 2 and f"exceeds CUDA's limit {limit}" in p.stderr


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [("ld.param.u32 \t%r2, [vector_add_param_3];", "ld.param.u32 \t%r2, [vector_add_param_9];", "unknown parameter"),
     ("mov.u32 \t%r3, %ctaid.x;", "mov.u32 \t%r3, %ctaid.q;", "unknown special register"),
     ("setp.ge.s32 \t%p1, %r1, %r2;", "setp.ge.s32 \t%p1, %r1;", "setp takes 3 to 4 operands"),
     ("// .globl\tvector_add", "/* .globl\tvector_add", "unterminated /* comment")],
)
def test_malformed_ptx_is_a_line_numbered_error_under_any_policy(tmp_path, old, new, fragment):
    text, line = edit(vector_add_ptx(), old, new) if old in vector_add_ptx() else edit(O3.read_text(), old, new)
    va = tmp_path / "va.ptx"
    va.write_text(text)
    for policy in ("error", "bounds"):
        p = run(str(va), *VA, "--param", "3=1000", "--policy", policy)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.startswith(f"error: {va}:{line}: ") and fragment in p.stderr
