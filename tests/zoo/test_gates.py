"""Channel-gate broadcasts materialised (src/zoo/gates.py).

The TVM tests need torch + apache-tvm (zoo extra; CI has them) and skip with the reason otherwise. The rules that
decide when the variant is compiled are tested in test_plausibility.py and test_target_runner.py.
"""

from __future__ import annotations

from src.zoo.gates import gate_side
from src.zoo.pipeline import MATERIALISED_GATES
from tests.zoo.test_kernel_cache import needs_tvm
from tests.zoo.test_tvmgen import _built, _gated


def _nf_gate():
    """A conv and an NFNet-style squeeze-excite block: gate (32 -> 32 -> 32), gain, scale and a residual add.

    With only `x * gate` TVM's fused kernel computes the gate once per thread block; with the chain after it (as in
    dm_nfnet) dlight schedules the fused function element-wise and every output element recomputes the gate."""
    return _gated(32, lambda m, x, gate: (x * gate * 2.0 * 0.2 + x).mean((2, 3)))


def _constant_scale():
    """A conv whose output is scaled per channel by a parameter (a layer scale): a constant, not a gate."""
    import torch
    from torch import nn

    class LayerScale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 32, 3, padding=1)
            self.gamma = nn.Parameter(torch.full((1, 32, 1, 1), 0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (self.conv(x) * self.gamma).mean((2, 3))

    return LayerScale().eval()


def test_a_gate_is_a_per_channel_operand_of_a_larger_map():
    assert gate_side([1, 32, 8, 8], [1, 32, 1, 1])
    assert gate_side([4, 32, 8, 8], [4, 1, 1, 1])  # one gate for every channel
    assert not gate_side([1, 32, 1, 1], [1, 32, 1, 1])  # nothing is broadcast
    assert not gate_side([1, 32, 8, 8], [1, 32, 8, 8])
    assert not gate_side([1, 32, 8, 8], [1, 16, 1, 1])  # channels that do not broadcast
    assert not gate_side(None, [1, 32, 1, 1])  # unknown (symbolic) shape


@needs_tvm
def test_the_variant_computes_the_gate_once_instead_of_per_pixel():
    """Default: TVM fuses the gate's 1x1 conv into the full-size multiply (kernel `..._sigmoid_multiply`), so every
    output element recomputes it. Variant: the gate kernel ends at the sigmoid, a broadcast-multiply kernel scales
    the map, and the executed instructions drop."""
    from src.zoo.pipeline import ptx_features
    from src.zoo.tvmgen import compile_cuda

    default = compile_cuda(_built("gate", _nf_gate()), 1)
    variant = compile_cuda(_built("gate", _nf_gate()), 1, materialise_gates=True)
    assert default.gates_materialised == 0 and variant.gates_materialised == 1
    fused = {x.kernel for x in default.launches}
    split = {x.kernel for x in variant.launches}
    assert any("sigmoid_multiply" in k for k in fused)
    assert not any("sigmoid_multiply" in k for k in split)
    assert any(k.startswith("fused_broadcast_to_multiply") for k in split)

    counts = {}
    for flag in (False, True):
        r = ptx_features("torch", "gate", 32, 1, ["sm_75"], built=_built("gate", _nf_gate()),
                         materialise_gates=flag)
        counts[flag] = r["by_arch"]["sm_75"]
        assert r.get("schedule_variant") == (MATERIALISED_GATES if flag else None)
    # 32 x 32 pixels x 32 channels each recomputing a 32-input dot product: ~1M FMAs the network does not have
    # (measured: 3.25M -> 2.18M)
    assert counts[True]["by_class"]["fma"] < counts[False]["by_class"]["fma"] - 0.5e6
    assert counts[True]["thread_instructions"] < counts[False]["thread_instructions"]


@needs_tvm
def test_a_constant_per_channel_scale_is_not_a_gate():
    from src.zoo.tvmgen import compile_cuda

    assert compile_cuda(_built("scale", _constant_scale()), 1, materialise_gates=True).gates_materialised == 0
