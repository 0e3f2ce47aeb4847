"""The harness on the CPU device with small real CNNs: rows follow the schema, precisions/layouts/modes apply."""

from __future__ import annotations

import pytest
import torch

from src.profiling.environment import describe_device
from src.profiling.harness import RunConfig, count_gmacs, prepare, run_config
from src.profiling.models import ResolvedModel, custom_model, resolve_model
from src.profiling.schema import OWN_COLUMNS, validate_rows
from tests.profiling.tinynets import tiny_cnn, two_heads

CPU = describe_device("cpu")
TINY = custom_model("tiny_cnn", tiny_cnn, img_size=32)


def _row(cfg: RunConfig, model: ResolvedModel = TINY, **kw) -> dict:
    return run_config(model, cfg, CPU, warmup=2, iters=7, run_id="test", source_file="data/own/test.csv", **kw)


def test_fp32_inference_row_follows_the_schema():
    row = _row(RunConfig("tiny_cnn", batch_size=4))
    validate_rows([row])
    assert list(row) == OWN_COLUMNS
    assert row["source"] == "own" and row["is_cpu"] is True and row["gpu"].startswith("cpu:")
    assert row["n_samples"] == 7 and row["warmup_iters"] == 2 and row["timer"] == "perf_counter"
    assert row["latency_stat"] == "median"
    assert row["latency_min_ms"] <= row["latency_ms"] <= row["latency_max_ms"]
    assert row["throughput"] == pytest.approx(4 / (row["latency_ms"] / 1000))
    assert row["param_count_m"] == pytest.approx(sum(p.numel() for p in tiny_cnn().parameters()) / 1e6)
    assert row["clock_source"] == "none" and row["clock_samples"] == 0
    assert row["profiling_wall_s"] >= row["warmup_s"] + row["timed_s"]
    assert row["measurement_id"] == "own:data/own/test.csv:custom:tiny_cnn|fp32|nchw|eager|inference|bs4|img32"


def test_gmacs_counts_conv_and_linear_macs():
    # conv1 3->8, 3x3 at 32x32; conv2 8->16, 3x3 stride 2 -> 16x16; linear 16->10
    expected = (8 * 3 * 9 * 32 * 32 + 16 * 8 * 9 * 16 * 16 + 16 * 10) / 1e9
    assert count_gmacs(TINY, 32) == pytest.approx(expected)


def test_precisions_and_layout_reach_model_and_input():
    bf16 = prepare(TINY, RunConfig("tiny_cnn", 2, precision="bf16"), "cpu")
    assert next(bf16.module.parameters()).dtype == torch.bfloat16
    assert bf16.step().dtype == torch.bfloat16
    amp = prepare(TINY, RunConfig("tiny_cnn", 2, precision="amp_bf16"), "cpu")
    assert next(amp.module.parameters()).dtype == torch.float32  # autocast leaves weights in fp32
    assert amp.step().dtype == torch.bfloat16  # ...but runs the linear layer in bf16
    nhwc = prepare(TINY, RunConfig("tiny_cnn", 2, memory_layout="nhwc"), "cpu")
    conv = nhwc.module[0]
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert nhwc.memory_layout == "nhwc"


def test_training_step_updates_weights_and_handles_tuple_outputs():
    model = custom_model("two_heads", two_heads, img_size=16)
    prepared = prepare(model, RunConfig("two_heads", 3, mode="training"), "cpu")
    before = [p.detach().clone() for p in prepared.module.parameters()]
    loss = prepared.step()
    prepared.step()
    assert prepared.module.training and torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, prepared.module.parameters(), strict=True))
    row = _row(RunConfig("two_heads", 3, mode="training", precision="amp_bf16"), model=model)
    validate_rows([row])
    assert row["mode"] == "training"


def test_torch_compile_mode_compiles_the_step_and_is_recorded():
    graphs = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:  # counts what Dynamo hands over
        graphs.append(gm)
        return gm.forward

    eager = prepare(TINY, RunConfig("tiny_cnn", 2), "cpu", compile_backend=backend)
    eager.step()
    assert graphs == []  # eager runs the module itself
    compiled = prepare(TINY, RunConfig("tiny_cnn", 2, compile_mode="torch_compile"), "cpu", compile_backend=backend)
    compiled.step()
    assert len(graphs) >= 1 and any(n.op == "call_module" or n.op == "call_function" for n in graphs[0].graph.nodes)
    row = _row(RunConfig("tiny_cnn", 2, compile_mode="torch_compile"), compile_backend="eager")
    validate_rows([row])
    assert row["compile_mode"] == "torch_compile"
    assert row["variant"] == "backend=eager"


def test_nhwc_input_models_record_the_layout_they_really_use():
    class NHWC(torch.nn.Module):  # takes (N, H, W, C) like the zoo's Keras wrapper
        def __init__(self) -> None:
            super().__init__()
            self.inner = tiny_cnn()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert x.shape[-1] == 3
            return self.inner(x.permute(0, 3, 1, 2))

    model = ResolvedModel(name="KerasLike", model_source="keras", family="keraslike", img_size=32, build=NHWC,
                          channels_last_input=True, supports_training=False)
    row = _row(RunConfig("KerasLike", 2, memory_layout="nchw"), model=model)
    assert row["memory_layout"] == "nhwc"
    with pytest.raises(ValueError, match="can only run inference"):
        prepare(model, RunConfig("KerasLike", 2, mode="training"), "cpu")


def test_bad_configurations_are_rejected_with_the_field_named():
    with pytest.raises(ValueError, match="precision='fp8'"):
        RunConfig("m", 1, precision="fp8")
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        RunConfig("m", 0)
    with pytest.raises(ValueError, match="compile_mode='xla'"):
        RunConfig("m", 1, compile_mode="xla")
    with pytest.raises(ValueError, match="cuda_graphs' times inference only"):
        RunConfig("m", 1, compile_mode="cuda_graphs", mode="training")


def test_cuda_graphs_on_the_cpu_is_a_clear_error():
    with pytest.raises(ValueError, match="cuda_graphs' needs a CUDA device, got 'cpu'"):
        prepare(TINY, RunConfig("tiny_cnn", 1, compile_mode="cuda_graphs"), "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU (run on a lent device)")
@pytest.mark.parametrize("precision", ["fp32", "amp_fp16"])
def test_cuda_graph_replay_matches_the_eager_forward(precision):
    cuda = describe_device("cuda")
    eager = prepare(TINY, RunConfig("tiny_cnn", 2, precision=precision), "cuda")
    graphed = prepare(TINY, RunConfig("tiny_cnn", 2, precision=precision, compile_mode="cuda_graphs"), "cuda")
    graphed.module.load_state_dict(eager.module.state_dict())
    # the graph captured the module's own weight tensors: copying into them changes what the replay computes
    torch.testing.assert_close(graphed.step().float(), eager.step().float(), rtol=2e-2, atol=2e-2)
    row = run_config(TINY, RunConfig("tiny_cnn", 1, precision=precision, compile_mode="cuda_graphs"), cuda,
                     warmup=2, iters=7, run_id="test", source_file="data/own/test.csv")
    validate_rows([row])
    assert row["compile_mode"] == "cuda_graphs" and row["timer"] == "cuda_event"


def test_python_factory_models_resolve():
    resolved = resolve_model("py:tests.profiling.tinynets:tiny_cnn")
    assert (resolved.name, resolved.img_size, resolved.model_source) == ("tiny_cnn", 32, "custom")
    with pytest.raises(LookupError, match="cannot import"):
        resolve_model("py:tests.profiling.tinynets:nope")


def test_unknown_models_say_what_was_tried():
    with pytest.raises(LookupError, match="tried"):
        resolve_model("definitely_not_a_cnn_9000")
    with pytest.raises(LookupError, match="unknown model source"):
        resolve_model("caffe:alexnet")


def test_cuda_without_a_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from src.profiling.environment import DeviceUnavailableError

    with pytest.raises(DeviceUnavailableError, match=r"torch.cuda.is_available\(\) is False"):
        describe_device("cuda")
