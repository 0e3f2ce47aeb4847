"""Regenerate tests/ptx/fixtures/tvm/: the PTX of every kernel of a TVM-compiled ResNet50 and its launch list.

Uses the project's model-to-PTX path (src/zoo, TVM 0.27 with CUDA codegen, no GPU needed) in the TVM venv:
    PYTHONPATH=. .venv-zoo/bin/python tests/ptx/cuda/gen_tvm_resnet50.py
The outputs are committed, so the PTX tests and benchmarks/ptx_bench.py run without TVM.
"""

from __future__ import annotations

import json
from pathlib import Path

from src.zoo.resolve import build
from src.zoo.tvmgen import compile_cuda, cuda_to_ptx

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "tvm"


def main() -> None:
    built = build("keras", "ResNet50")
    compiled = compile_cuda(built, 1)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "resnet50_sm_86.ptx").write_text(cuda_to_ptx(compiled.cuda_source, "sm_86"))
    launches = [{"kernel": x.kernel, "grid": list(x.grid), "block": list(x.block), "calls": x.calls,
                 "params": x.params} for x in compiled.launches]
    meta = {"model": "keras ResNet50, batch 1, TVM 0.27 default GPU schedules, nvcc 13.0 -arch=sm_86",
            "launches": launches}
    (OUT / "resnet50_launches.json").write_text(json.dumps(meta, indent=1))
    print(f"{len(launches)} launches, {sum(x['calls'] for x in launches)} calls -> {OUT}")


if __name__ == "__main__":
    main()
