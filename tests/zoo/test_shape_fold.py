"""Constant folding by shape only: the same kernels and launches as TVM's folding, without computing weights.

Needs the zoo extra (torch, apache-tvm) and nvcc, and skips with the reason otherwise (CI has them).
"""

from __future__ import annotations

import pytest

from tests.zoo.test_kernel_cache import needs_tvm


@pytest.fixture(scope="module")
def standardised():
    """A CNN that standardises its conv weights and transposes a linear weight in every forward pass (as NFNets
    and ConvNeXt do): work that constant folding moves from the GPU to compile time."""
    import torch

    from src.zoo.names import ModelSpec
    from src.zoo.resolve import Built

    class StdConvNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(16, 3, 3, 3))
            self.gain = torch.nn.Parameter(torch.ones(16, 1, 1, 1))
            self.fc = torch.nn.Linear(16, 10)

        def forward(self, x):
            w = self.weight
            w = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / (w.var(dim=(1, 2, 3), keepdim=True) + 1e-5).sqrt()
            x = torch.nn.functional.conv2d(x, w * self.gain, padding=1).relu()
            return self.fc(x.mean(dim=(2, 3)))

    return Built(ModelSpec("torch", "std_conv_net", 32), 32, "torch", (1, 3, 32, 32), module=StdConvNet().eval())


@needs_tvm
def test_shape_only_folding_gives_the_kernels_of_real_folding(standardised, monkeypatch):
    import tvm.tirx.build  # noqa: F401  (registers tirx.build)
    import tvm_ffi

    from src.zoo import tvmgen
    from src.zoo.kernel_cache import split_cuda
    from src.zoo.shape_fold import BUILD_FUNC

    real_build = tvm_ffi.get_global_func(BUILD_FUNC)
    shape_only = tvmgen.compile_cuda(standardised, 1)
    assert tvm_ffi.get_global_func(BUILD_FUNC).same_as(real_build)  # the override is gone afterwards
    monkeypatch.setattr(tvmgen, "SHAPE_ONLY_FOLDING", False)
    real = tvmgen.compile_cuda(standardised, 1)

    def kernels(c):
        return sorted((x.kernel, x.grid, x.block, x.calls) for x in c.launches), {
            k.name: k.digest for k in split_cuda(c.cuda_source)[1]}

    assert kernels(shape_only) == kernels(real)
    # Folding happened: no kernel standardises the weight (mean, variance, sqrt) at run time.
    ops = " ".join(x.kernel for x in real.launches)
    assert "variance" not in ops and "sqrt" not in ops and "mean" in ops  # the activations' mean stays


@needs_tvm
def test_needs_values_spots_tensor_to_shape():
    from tvm.script import ir as I  # noqa: E741
    from tvm.script import relax as R

    from src.zoo.shape_fold import needs_values

    @I.ir_module
    class ToShape:
        @R.function
        def main(x: R.Tensor((3,), "int64")):
            with R.dataflow():
                s = R.tensor_to_shape(x)
                R.output(s)
            return s

    @I.ir_module
    class Plain:
        @R.function
        def main(x: R.Tensor((3,), "int64")):
            with R.dataflow():
                s = R.add(x, x)
                R.output(s)
            return s

    assert needs_values(ToShape) and not needs_values(Plain)
