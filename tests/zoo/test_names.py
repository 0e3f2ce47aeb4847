"""Name resolution, arch mapping and launch-list assembly: pure code, runs without the heavy extra."""

from __future__ import annotations

import subprocess
import sys

import pytest

from src.zoo.names import (
    UnknownModelError,
    benchmark_alias,
    check_source,
    keras_name,
    spec_for_measured,
    torchvision_name,
)
from src.zoo.targets import cc_to_arch
from src.zoo.tvmgen import Launch, PtxGenerationError, arch_number, kernel_geometry, launch_list, ptx_arch_for


def test_unknown_keras_name_names_it_and_close_matches():
    with pytest.raises(UnknownModelError) as err:
        keras_name("EfficientNetB9")
    msg = str(err.value)
    assert "EfficientNetB9" in msg and "EfficientNetB7" in msg


def test_keras_name_is_case_insensitive():
    assert keras_name("efficientnetb0") == "EfficientNetB0"
    assert keras_name("resnet50v2") == "ResNet50V2"


def test_unknown_torchvision_and_source():
    with pytest.raises(UnknownModelError, match="resnet50"):
        torchvision_name("resnet5O")
    with pytest.raises(UnknownModelError, match="expected one of keras"):
        check_source("caffe")


def test_benchmark_aliases_and_measured_specs():
    assert benchmark_alias("inception3", "tf_cnn_benchmarks") == ("keras", "InceptionV3")
    assert benchmark_alias("inception-bn", "dlinfbench") == ("torchvision", "googlenet")
    assert benchmark_alias("inception4", "dlinfbench") is None
    spec = spec_for_measured("resnet50.a1_in1k", "resnet50", "timm", 288)
    assert (spec.source, spec.name, spec.input_size) == ("timm", "resnet50", 288)
    assert spec_for_measured("nosuchnet", "nosuchnet", "torchvision", 224) is None


def test_arch_helpers():
    assert cc_to_arch(8.6) == "sm_86" and cc_to_arch(12.0) == "sm_120" and cc_to_arch(6.1) == "sm_61"
    assert arch_number("sm_120") == 120
    assert ptx_arch_for("sm_61") == "sm_75" and ptx_arch_for("sm_89") == "sm_89"
    with pytest.raises(ValueError, match="sm_86"):
        arch_number("ampere")


def test_choose_nvcc_arch():
    from src.zoo.pipeline import choose_nvcc_arch

    assert choose_nvcc_arch("sm_86", None) == "sm_86"
    assert choose_nvcc_arch("sm_86", ["sm_75", "sm_120"]) == "sm_75"
    assert choose_nvcc_arch("sm_120", ["sm_75", "sm_120"]) == "sm_120"
    assert choose_nvcc_arch("sm_61", ["sm_80"]) == "sm_80"


# Text as TVM 0.27 prints a lowered device kernel (abridged from a real resnet18 `mean_kernel`).
KERNEL_SCRIPT = '''
@T.prim_func(s_tir=True)
def mean_kernel(T_divide_ptr: T.handle("float32", "global"), lv88_ptr: T.handle("float32", "global")):
    with T.launch_thread("blockIdx.x", 512) as blockIdx_x:
        lv88_red_rf_local = T.alloc_local((1,))
        with T.launch_thread("threadIdx.x", 32) as threadIdx_x:
            lv88_red_rf_local[0] = T.float32(0.0)
        with T.launch_thread("threadIdx.y", T.int64(4)) as threadIdx_y:
            T.evaluate(0)
'''


def test_kernel_geometry_from_launch_threads():
    grid, block = kernel_geometry(KERNEL_SCRIPT, "mean_kernel")
    assert grid == (512, 1, 1) and block == (32, 4, 1)


def test_kernel_geometry_rejects_dynamic_extent():
    with pytest.raises(PtxGenerationError, match="non-constant"):
        kernel_geometry('T.launch_thread("blockIdx.x", n // 4)', "k")


def test_launch_list_counts_calls_not_functions():
    geometry = {"conv_kernel": ((2, 1, 1), (64, 1, 1)), "add_kernel": ((4, 1, 1), (256, 1, 1)),
                "add_kernel_1": ((1, 1, 1), (32, 1, 1))}
    launches = launch_list(["conv", "add", "conv", "conv"], geometry)
    by = {x.kernel: x for x in launches}
    assert by["conv_kernel"].calls == 3 and by["add_kernel"].calls == 1 and by["add_kernel_1"].calls == 1
    assert isinstance(launches[0], Launch) and launches[0].kernel == "conv_kernel"
    with pytest.raises(PtxGenerationError, match="no CUDA kernel"):
        launch_list(["missing"], geometry)


def test_cli_unknown_model_exit_code_and_message():
    proc = subprocess.run([sys.executable, "-m", "src.zoo", "static", "--source", "keras", "--model",
                           "ResNet5O", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "ResNet5O" in proc.stderr and "ResNet50" in proc.stderr


def test_describe_names_where_a_silent_assertion_fired():
    from src.zoo.tvmgen import describe

    def schedule_rule():
        raise AssertionError  # an assert without message, as in TVM's dlight rules

    try:
        schedule_rule()
    except AssertionError as exc:
        text = describe(exc)
    assert text.startswith("AssertionError (no message) at ") and "test_names.py" in text
    assert describe(ValueError("first\nlast")) == "ValueError: last"
    assert describe(ValueError("first\nlast"), first=True) == "ValueError: first"


def test_describe_keeps_the_message_of_a_tvm_pass_error():
    """TVM's pass errors end in a TVMScript dump; the reason must be the check that failed, not the dump's tail."""
    from src.zoo.tvmgen import describe

    tvm_text = ("Check failed: n_deepest_reduction_loops == reduction_loops.size() (0 vs. 1) : Cross-thread reduction\n"
                "\nError in pass: _pipeline\nLocation (TVMScript):\n(... 1874 lines skipped ...)\n"
                "    for ax0 in T.thread_binding(T.int64(392), thread=\"blockIdx.x\"):\n(... 580 lines skipped ...)")
    assert describe(ValueError(tvm_text)) == ("ValueError: Check failed: n_deepest_reduction_loops == "
                                              "reduction_loops.size() (0 vs. 1) : Cross-thread reduction")
    assert describe(ValueError("message\n(... 3 lines skipped ...)")) == "ValueError: message"


def test_reparameterised_rows_build_the_fused_form():
    """A timm row measured with --reparam (key suffix) asks for the re-parameterised definition; others do not."""
    from src.ingest.models import REPARAM_SUFFIX
    from src.zoo.names import ModelSpec, spec_for_measured

    assert spec_for_measured("repvgg_a2.rvgg_in1k", "repvgg_a2" + REPARAM_SUFFIX, "timm", 224) == ModelSpec(
        "timm", "repvgg_a2" + REPARAM_SUFFIX, 224)
    assert spec_for_measured("repvgg_a2.rvgg_in1k", "repvgg_a2", "timm", 224) == ModelSpec("timm", "repvgg_a2", 224)


def test_reparameterised_build_folds_branches():
    """timm's reparameterize_model on a real MobileOne: fewer parameters (branches folded), and on the meta device
    (as the layers stage builds) too; an architecture without that form is refused by name."""
    pytest.importorskip("timm")
    import torch

    from src.zoo.names import UnknownModelError
    from src.zoo.resolve import build

    def n_params(m: torch.nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    plain, fused = build("timm", "mobileone_s0"), build("timm", "mobileone_s0+reparam")
    assert round(n_params(plain.module) / 1e6, 2) == 5.29 and round(n_params(fused.module) / 1e6, 2) == 2.08
    assert fused.spec.name == "mobileone_s0+reparam" and fused.input_shape == plain.input_shape
    with torch.device("meta"):
        assert n_params(build("timm", "mobileone_s0+reparam").module) == n_params(fused.module)
    with pytest.raises(UnknownModelError, match="no re-parameterised form"):
        build("timm", "resnet18+reparam")


def test_legacy_names_are_timms_deprecated_names_less_the_other_networks():
    """src/ingest/legacy_names.py is timm's own table of deprecated names, less the ones that build another network
    (ig_resnext101 widths, 21k/22k pretraining heads): regenerated here from the installed timm."""
    pytest.importorskip("timm")
    import re

    from timm.models._registry import _deprecated_models

    from src.ingest.legacy_names import TIMM_LEGACY_NAMES
    from src.ingest.models import plain_model_key

    other_network = re.compile(r"(in21k|in22k|_22k)$|^ig_resnext101_32x(16|32|48)d$")
    expected = {plain_model_key(old): plain_model_key(new) for old, new in _deprecated_models.items()
                if new and plain_model_key(old) != plain_model_key(new)
                and not other_network.search(plain_model_key(old))}
    assert TIMM_LEGACY_NAMES == expected
