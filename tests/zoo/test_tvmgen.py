"""dlight rule fallbacks: a CNN whose default GPU schedules fail to schedule or lower still compiles, and says how.

Needs torch + apache-tvm (zoo extra; CI has them) and skips with the reason otherwise.
"""

from __future__ import annotations

from tests.zoo.test_kernel_cache import needs_tvm


def _split_attention():
    """ResNeSt's split-attention block in small: a grouped 1x1 conv on a pooled (1x1) map.

    With every dlight rule, Reduction schedules that grouped conv as a cross-thread reduction that TVM cannot
    lower; without Reduction, GEMV claims it and asserts. It compiles with both left out (timm resnest50d_*).
    """
    import torch
    from torch import nn

    class SplitAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 96, 3, padding=1)
            self.fc1 = nn.Conv2d(48, 24, 1)
            self.fc2 = nn.Conv2d(24, 96, 1, groups=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.conv(x)
            b, c, h, w = x.shape
            pooled = x.view(b, 2, c // 2, h, w).sum(1).mean((2, 3), keepdim=True)
            attn = self.fc2(torch.relu(self.fc1(pooled))).view(b, 2, c // 2, 1, 1).softmax(1).reshape(b, c, 1, 1)
            return (x * attn).sum((2, 3))

    return SplitAttention().eval()


@needs_tvm
def test_a_module_no_single_rule_set_lowers_compiles_without_gemv_and_reduction():
    from src.zoo.names import ModelSpec
    from src.zoo.resolve import Built
    from src.zoo.tvmgen import compile_cuda

    built = Built(ModelSpec("torch", "split_attention", 32), 32, "torch", (1, 3, 32, 32), module=_split_attention())
    compiled = compile_cuda(built, 1)
    assert compiled.non_kernel_calls.get("schedule_without_gemv_reduction") == 1
    assert len(compiled.launches) >= 5 and "__global__" in compiled.cuda_source
    # failed attempts are timed too: each attempt rebuilt the module (export, import) and scheduled it
    assert compiled.seconds["schedule"] > 0 and compiled.seconds["lower"] > 0


@needs_tvm
def test_a_module_the_default_rules_handle_records_no_fallback():
    from src.zoo.names import ModelSpec
    from src.zoo.resolve import Built
    from src.zoo.tvmgen import compile_cuda
    from tests.zoo.test_static import Tiny

    compiled = compile_cuda(Built(ModelSpec("torch", "tiny", 32), 32, "torch", (1, 3, 32, 32), module=Tiny().eval()), 1)
    assert not [k for k in compiled.non_kernel_calls if k.startswith("schedule_without_")]


def test_fallback_rule_sets_start_with_every_rule():
    from src.zoo.tvmgen import SCHEDULE_FALLBACKS

    assert SCHEDULE_FALLBACKS[0] == () and ("gemv", "reduction") in SCHEDULE_FALLBACKS
