"""The parsers on the real mirror files."""

from src.ingest.models import REPARAM_SUFFIX, base_model_key, is_reparameterizable
from src.ingest.sources import dlinfbench, lambda_tf, ryujaehun, timm
from src.ingest.validate import validate


def test_timm_file(mirror):
    rel = "timm/benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv"
    result = timm.parse_file(mirror / rel, rel, "5c33776aa59f")
    assert result.n_read == 1443 and not result.quarantine
    frame, quarantine = validate(result.rows)
    assert len(frame) + len(quarantine) == 1443
    row = frame[frame["model"] == "resnet50"].iloc[0]
    assert row["gpu"] == "GeForce RTX 3090" and row["precision"] == "amp_fp16"
    assert row["framework_version"] == "2.4.0" and row["cuda_version"] == "12.4"
    assert row["memory_layout"] == "nchw" and row["compile_mode"] == "eager" and row["mode"] == "inference"
    assert row["param_count_m"] == 25.56 and row["gmacs"] > 1 and row["activations_m"] > 1
    assert abs(row["batch_size"] / row["latency_ms"] * 1000 / row["throughput"] - 1) < 0.05


def test_timm_file_names():
    ctx = timm.file_context("benchmark-infer-amp_bf16-nchw-pt291-cu130-pro6000maxq-dynamo.csv")
    assert ctx["precision"] == "amp_bf16" and ctx["compile_mode"] == "torch_compile"
    assert ctx["framework_version"] == "2.9.1" and ctx["cuda_version"] == "13.0"
    assert timm.file_context("benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv")["framework_version"] == "1.12"
    assert timm.file_context("model_metadata-in1k.csv") is None


def test_ryujaehun_per_iteration_file(mirror):
    rel = ("ryujaehun-pytorch-gpu-benchmark/master/results/dgx-a100/"
           "A100-SXM4-40GB_2_gpus__half_model_inference_benchmark.csv")
    result = ryujaehun.parse_file(mirror / rel, rel, "3f47a9e", warmup=1)
    assert result.n_read == 32 and len(result.rows) == 32
    row = next(r for r in result.rows if r["model"] == "resnet50")
    assert row["gpu"] == "A100 SXM4 40 GB" and row["num_gpus"] == 2 and row["batch_size"] == 24
    assert row["precision"] == "fp16" and row["n_samples"] == 49 and row["latency_stat"] == "median"
    assert 0 < row["latency_spread_ms"] < row["latency_ms"]


def test_ryujaehun_unrecorded_batch_is_quarantined(mirror):
    rel = "ryujaehun-pytorch-gpu-benchmark/master/results/TitanV/TITAN V_single_model_inference_benchmark.csv"
    result = ryujaehun.parse_file(mirror / rel, rel, "3f47a9e")
    assert not result.rows and len(result.quarantine) == result.n_read == 15
    assert all(q["reason"] == ryujaehun.UNRECORDED_BATCH for q in result.quarantine)


def test_dlinfbench_environment_and_rows(mirror):
    env = dlinfbench.environment((mirror / "nicklhy-DLInfBench/RESULT_TeslaV100.md").read_text())
    assert env["gpu"] == "Tesla V100-PCIE" and env["cuda"] == "9.1" and env["pytorch"] == "0.4.0"
    folder = mirror / "nicklhy-DLInfBench/results/tesla_v100"
    items = [(f"nicklhy-DLInfBench/results/tesla_v100/{p.name}", p) for p in folder.glob("*.txt")]
    result = dlinfbench.parse_folder(items, "nicklhy-DLInfBench/results/tesla_v100", "a626be2", env)
    assert result.n_read == len(items) == len(result.rows)
    frame, quarantine = validate(result.rows)
    assert not quarantine
    row = frame[(frame["framework"] == "pytorch") & (frame["model"] == "resnet50") & (frame["batch_size"] == 32)
                & (frame["precision"] == "fp32")].iloc[0]
    assert row["latency_ms"] == 32 / row["throughput"] * 1000


def test_lambda_labels():
    assert lambda_tf.system_gpu("7742-4xA100-SXM4-40GB_TF2_3") == ("A100-SXM4-40GB", 4)
    assert lambda_tf.system_gpu("Gold_6230-GeForce_RTX_2080_Ti_NVLink_XLA_trt2_TF1_15")[0] == "GeForce_RTX_2080_Ti"
    assert lambda_tf.system_gpu("Processor-LambdaCloud_2xQuadro_RTX_6000") == ("Quadro_RTX_6000", 2)
    assert lambda_tf.software("Gold_6230-Quadro_RTX_8000_XLA_trt_TF1_15", {})["compile_mode"] == "xla"
    assert lambda_tf.summary_gpu("Lambda Cloud — 2x RTX A6000") == ("RTX A6000", 2, "")
    assert lambda_tf.summary_gpu("4x2080Ti_NVLink_XLA_trt")[:2] == ("2080Ti", 4)


def test_lambda_trt_label_is_not_tensorrt_and_xla_follows_the_logs():
    """`_trt` systems ran plain TF graphs (no --trt_mode, no libnvinfer in their logs); XLA is what the logs show."""
    assert lambda_tf.software("Gold_6230-GeForce_RTX_2080_Ti_trt2_TF1_15", {"TF": "1.15.3"}) == {
        "compile_mode": "eager", "framework_version": "1.15", "cuda_version": ""}
    assert lambda_tf.software("Gold_6230-GeForce_RTX_2080_Ti_NVLink_XLA_trt2_TF1_15", {})["compile_mode"] == "xla"
    assert lambda_tf.software("Gold_6230-GeForce_RTX_2080_Ti_NVLink_XLA_trt2_TF1_15", {},
                              "real")["compile_mode"] == "eager"
    assert lambda_tf.software("7662-GeForce_RTX_3090", {"TF": "2.4.0"})["compile_mode"] == "xla"
    assert lambda_tf.software("7742-1xA100-SXM4-40GB_TF2_3", {})["compile_mode"] == "eager"


def test_lambda_logs_and_summaries(mirror):
    files = {
        rel: mirror / rel
        for rel in [lambda_tf.DERIVED, *[p for pair in lambda_tf.TRAIN_SUMMARIES.values() for p in pair],
                    *lambda_tf.INFERENCE_SUMMARIES.values()]
    }
    logs = lambda_tf.parse_logs(files[lambda_tf.DERIVED], "e086e0e", files)
    assert logs.n_read == 3954
    modes = {(r["device_raw"], r["data_mode"]): r["compile_mode"] for r in logs.rows}
    assert set(modes.values()) == {"eager", "xla"}
    assert modes[("Gold_6230-Quadro_RTX_8000_trt_TF1_15", "synthetic")] == "eager"
    assert modes[("7502-A100-PCIE-40GB", "synthetic")] == "xla"
    assert modes[("Gold_6230-GeForce_RTX_2080_Ti_NVLink_XLA_trt2_TF1_15", "real_distorted")] == "eager"
    reasons = {q["reason"] for q in logs.quarantine}
    assert "missing value: run printed no total images/sec" in reasons
    assert any(r.startswith("non-NVIDIA device") for r in reasons)
    keys = {(r["gpu"], r["num_gpus"], r["precision"], r["mode"], r["model"], int(r["batch_size"])) for r in logs.rows}
    summaries = lambda_tf.parse_summaries(files, {rel: "e086e0e" for rel in files}, keys)
    reasons = [q["reason"] for q in summaries.quarantine]
    assert "zero stands for missing (not run or failed)" in reasons
    assert len(summaries.rows) + len(summaries.quarantine) == summaries.n_read


def test_timm_reparameterised_files():
    assert timm.file_context("benchmark-infer-amp-nchw-pt291-cu128-4090.csv")["reparameterized"]
    assert not timm.file_context("benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv")["reparameterized"]
    assert not timm.file_context("model_benchmark_amp_nchw_rtx3090.csv")["reparameterized"]


def _timm_params(mirror, name: str) -> dict[str, float]:
    rel = f"timm/{name}"
    return {r["model_key"]: r["param_count_m"] for r in timm.parse_file(mirror / rel, rel, "90cae8c5ab83").rows}


def test_timm_reparam_rule_matches_the_files_own_figures(mirror):
    """The rule (pt291 files ran --reparam; REPARAMETERIZABLE) against the files' own parameter counts: every model
    the RTX 4090 files of pt240 and pt291 both list reports the pt240 count in pt291 unless it got the suffix, and
    a suffixed one reports no more (the fused form). A re-parameterisable architecture the rule missed fails here."""
    old = _timm_params(mirror, "benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv")
    new = _timm_params(mirror, "benchmark-infer-amp-nchw-pt291-cu128-4090.csv")
    fused = {k: v for k, v in new.items() if k.endswith(REPARAM_SUFFIX) and base_model_key(k) in old}
    same = {k: v for k, v in new.items() if k in old and not is_reparameterizable(k) and old[k] and v}
    assert {base_model_key(k).split("_")[0] for k in fused} >= {"mobileone", "repvgg", "repghostnet", "repvit"}
    assert all(v <= old[base_model_key(k)] for k, v in fused.items())  # BN folding: -0.3 % can round away
    assert sum(v < old[base_model_key(k)] for k, v in fused.items()) > 0.8 * len(fused)
    changed = {k for k, v in same.items() if abs(v / old[k] - 1) > 0.005}
    assert len(same) > 900 and changed == {"vitamin_small_224"}  # redefined between timm releases (+0.6 %)
