"""Why an answer is an extrapolation: unmeasured GPU, out-of-range input, untrained setup or release."""

import numpy as np
import pandas as pd
import pytest

from src.features.extrapolation import extrapolation_reasons, setting_reasons, training_settings


def test_extrapolation_reasons_per_row():
    meta = {"training_gpus": ["A"], "training_ranges": {"batch_size": [1, 128], "bw": [100.0, 1000.0]}}
    joined = {"gpu": np.array(["A", "B", "A", "B"], dtype=object), "batch_size": np.array([8, 8, 4096, 4096.0]),
              "bw": np.array([500.0, 2000.0, 500.0, 500.0])}
    got = extrapolation_reasons(joined, meta).tolist()
    assert got == ["", "GPU not in the training data; bw 2000 outside the training range [100, 1000]",
                   "batch_size 4096 outside the training range [1, 128]",
                   "GPU not in the training data; batch_size 4096 outside the training range [1, 128]"]
    joined["compile_mode"] = np.array(["eager", "eager", "tensorrt", "eager"], dtype=object)
    got = extrapolation_reasons(joined, meta, unseen={"compile_mode": np.array([False, False, True, False])})
    assert got[2] == ("batch_size 4096 outside the training range [1, 128]; compile_mode 'tensorrt' has no "
                      "training rows of its kind: bare physics estimate x one constant training efficiency (the "
                      "unseen-kind fallback)")


def test_setting_reasons_flag_a_setup_or_named_release_no_training_row_had():
    trained = pd.DataFrame({"framework": ["pytorch", "pytorch", "pytorch", "tensorflow"],
                            "precision": ["amp_fp16", "amp_fp16", "fp32", "fp32"],
                            "mode": ["inference", "inference", "training", "inference"],
                            "memory_layout": ["nchw"] * 4, "compile_mode": ["eager", "eager", "eager", "xla"],
                            "framework_version": ["2.4.0", "2.9.1", "unknown", "1.15"], "gpu": ["A"] * 4})
    settings = training_settings(pd.concat([trained, trained]))  # duplicates collapse
    assert len(settings) == 4 and settings[0] == ["pytorch", "amp_fp16", "inference", "nchw", "eager", "2.4.0"]
    joined = {"framework": np.array(["pytorch", "pytorch", "pytorch", "pytorch", "tensorflow"], dtype=object),
              "precision": np.array(["amp_fp16", "amp_fp16", "amp_fp16", "amp_fp16", "fp32"], dtype=object),
              "mode": np.array(["inference", "inference", "inference", "training", "inference"], dtype=object),
              "memory_layout": np.array(["nchw"] * 5, dtype=object),
              "compile_mode": np.array(["eager", "eager", "eager", "eager", "xla"], dtype=object),
              "framework_version": np.array(["2.9.1", "unknown", "2.11.0", "2.4.0", "1.15"], dtype=object),
              "gpu": np.array(["A"] * 5, dtype=object)}
    got = setting_reasons(joined, settings).tolist()
    assert got == ["", "",  # a trained setting; a trained setup whose release the request does not name
                   "framework_version '2.11.0' has no training rows in this setup (trained: ['2.4.0', '2.9.1'])",
                   "no training row ran this setup (framework pytorch, precision amp_fp16, mode training, "
                   "memory_layout nchw, compile_mode eager)", ""]
    # and it is one of the reasons of the served answer (a model without the list flags nothing)
    reasons = extrapolation_reasons(joined, {"training_gpus": ["A"], "training_settings": settings})
    assert (reasons != "").tolist() == [False, False, True, True, False]
    assert (extrapolation_reasons(joined, {"training_gpus": ["A"]}) == "").all()
    with pytest.raises(KeyError, match=r"setting column\(s\) \['framework_version'\]"):
        training_settings(trained.drop(columns="framework_version"))


def test_interval_escalations_flag_gpus_beyond_the_spec_range_and_unseen_runtimes():
    from src.features.extrapolation import beyond_range, interval_escalations, training_ranges

    trained = pd.DataFrame({"bw": [300.0, 900.0], "cc": [6.1, 8.6], "batch_size": [1, 256]})
    meta = {"gpu_features": ["bw", "cc"], "training_ranges": training_ranges(trained, ["bw", "cc", "batch_size"])}
    assert meta["training_ranges"] == {"bw": [300.0, 900.0], "cc": [6.1, 8.6], "batch_size": [1.0, 256.0]}
    joined = {"gpu": np.array(["in", "faster", "newer", "older", "big batch"], dtype=object),
              "bw": np.array([500.0, 3350.0, 800.0, 200.0, 500.0]), "cc": np.array([7.5, 8.0, 9.0, 7.0, 7.5]),
              "batch_size": np.array([8, 8, 8, 8, 4096])}
    esc = interval_escalations(joined, meta)
    # a GPU faster, newer or older than every trained one is a new generation; a batch beyond the range is not
    assert esc["arch"].tolist() == [False, True, True, True, False]
    assert not esc["runtime"].any()
    assert beyond_range(joined, meta, ["batch_size"]).tolist() == [False] * 4 + [True]
    unseen = {"compile_mode": np.array([1, 0, 0, 0, 0], bool), "precision": np.array([0, 0, 0, 0, 1], bool)}
    assert interval_escalations(joined, meta, unseen)["runtime"].tolist() == [True, False, False, False, True]
    # a request without a spec column (or a model without ranges) counts as inside
    assert not interval_escalations({"gpu": joined["gpu"]}, meta)["arch"].any()
    assert not interval_escalations(joined, {"gpu_features": ["bw"]})["arch"].any()


def test_untrained_setups_widen_the_interval_of_a_setup_no_training_row_ran():
    from src.features.extrapolation import interval_escalations, setup_labels, untrained_setups

    trained = pd.DataFrame({"framework": ["pytorch", "pytorch", "tensorflow"],
                            "precision": ["amp_fp16", "fp32", "fp32"], "mode": ["inference"] * 3,
                            "memory_layout": ["nchw"] * 3, "compile_mode": ["eager", "eager", "xla"],
                            "framework_version": ["2.4.0", "1.13", "2.15"]})
    settings = training_settings(trained)
    joined = {"gpu": np.array(["A"] * 4, dtype=object),
              "framework": np.array(["pytorch", "tensorflow", "tensorflow", "pytorch"], dtype=object),
              "precision": np.array(["fp32", "fp32", "fp32", "fp32"], dtype=object),
              "mode": np.array(["inference"] * 4, dtype=object), "memory_layout": np.array(["nchw"] * 4, dtype=object),
              "compile_mode": np.array(["eager", "xla", "tensorrt", "xla"], dtype=object),
              # a release no training row ran in a trained setup is not a new setup (only flagged in extrapolation)
              "framework_version": np.array(["2.9.1", "2.15", "2.15", "2.4.0"], dtype=object)}
    # TensorFlow with TensorRT and PyTorch with XLA: no training row ran either setup
    assert untrained_setups(joined, settings).tolist() == [False, False, True, True]
    assert interval_escalations(joined, {"training_settings": settings})["setup"].tolist() == [0, 0, 1, 1]
    assert setup_labels(joined)[2] == "tensorflow\x1ffp32\x1finference\x1fnchw\x1ftensorrt"
    # the served flags agree: each such row names its setup in `extrapolation`
    assert all("no training row ran this setup" in r
               for r in extrapolation_reasons(joined, {"training_settings": settings})[2:])
    # a model without the list (or a request without a setup field) flags none
    assert not interval_escalations(joined, {})["setup"].any()
    assert not untrained_setups({k: v for k, v in joined.items() if k != "memory_layout"}, settings).any()


def test_a_precision_the_gpu_has_no_units_for_is_flagged():
    joined = {"gpu": np.array(["Tesla T4", "A100", "Tesla T4", "GTX 1080", "GTX 1080", "Tesla P100", "Tesla T4"],
                              dtype=object),
              "precision": np.array(["bf16", "bf16", "amp_fp16", "amp_fp16", "int8", "int8", "amp_bf16"],
                                    dtype=object),
              "compute_capability": np.array([7.5, 8.0, 7.5, 6.1, 6.1, 6.0, 7.5])}
    got = extrapolation_reasons(joined, {}).tolist()
    assert got[0] == ("GPU 'Tesla T4' (compute capability 7.5) has no bf16 tensor cores for precision 'bf16' (they "
                      "need 8+): priced at its fp32 rate; no training row ran 'bf16' on such a GPU")
    assert got[3] == ("GPU 'GTX 1080' (compute capability 6.1) has no fp16 tensor cores for precision 'amp_fp16' "
                      "(they need 7+): priced at the better of its fp16 and fp32 CUDA-core rates; no training row "
                      "ran 'amp_fp16' on such a GPU")
    assert got[5].startswith("GPU 'Tesla P100' (compute capability 6) has no int8 dot-product instructions")
    assert got[6].startswith("GPU 'Tesla T4' (compute capability 7.5) has no bf16 tensor cores for precision "
                             "'amp_bf16'")
    # the units are there: bf16 on Ampere, fp16 tensor math on Turing, dp4a on cc 6.1
    assert got[1] == got[2] == got[4] == ""
    # a request joined without the GPU's compute capability flags nothing
    assert (extrapolation_reasons({k: v for k, v in joined.items() if k != "compute_capability"}, {}) == "").all()
    # a precision training rows did run without its units (fp16 on Pascal) is not flagged; the others still are
    got = extrapolation_reasons(joined, {"unit_fallback_precisions": ["amp_fp16"]}).tolist()
    assert got[3] == "" and got[0].startswith("GPU 'Tesla T4'") and got[5] != ""


def test_the_precisions_training_rows_ran_without_their_units():
    from src.features.extrapolation import unit_fallback_precisions

    frame = pd.DataFrame({"precision": ["fp16", "fp16", "bf16", "int8", "fp32"],
                          "compute_capability": [6.1, 7.5, 8.0, 7.5, 3.5]})
    assert unit_fallback_precisions(frame) == ["fp16"]
    assert unit_fallback_precisions(frame.drop(columns="compute_capability")) == []


def test_a_trained_setup_on_a_gpu_unlike_any_it_ran_on_is_flagged_and_widened():
    from src.features.extrapolation import interval_escalations, setup_gpu_ranges

    setup = {"framework": "pytorch", "precision": "fp16", "mode": "inference", "memory_layout": "nchw",
             "compile_mode": "tensorrt", "framework_version": "unknown"}
    # torch2trt's PyTorch + TensorRT fp16 rows: Jetson boards only
    train = pd.DataFrame([{**setup, "gpu": g, "memory_bandwidth_gbs": bw, "compute_capability": cc}
                          for g, bw, cc in [("Jetson Nano", 25.6, 5.3), ("Jetson AGX Xavier", 136.5, 7.2)]]
                         + [{**setup, "compile_mode": "eager", "gpu": "GeForce RTX 4090",
                             "memory_bandwidth_gbs": 1008.0, "compute_capability": 8.9}])
    meta = {"training_settings": training_settings(train), "setup_gpu_ranges": setup_gpu_ranges(train)}
    assert meta["setup_gpu_ranges"][1] == {"setup": ["pytorch", "fp16", "inference", "nchw", "tensorrt"],
                                           "ranges": {"memory_bandwidth_gbs": [25.6, 136.5],
                                                      "compute_capability": [5.3, 7.2]}}
    joined = {c: np.array([v] * 3, dtype=object) for c, v in setup.items()}
    joined.update({"gpu": np.array(["GeForce RTX 4090", "Jetson Xavier NX", "GeForce RTX 4090"], dtype=object),
                   "memory_bandwidth_gbs": np.array([1008.0, 59.7, 1008.0]),
                   "compute_capability": np.array([8.9, 7.2, 8.9])})
    joined["compile_mode"][2] = "eager"
    got = extrapolation_reasons(joined, meta).tolist()
    assert got[0] == ("setup pytorch / fp16 / inference / nchw / tensorrt ran in training only on GPUs with "
                      "memory_bandwidth_gbs 25.6-136.5 (this GPU: 1008); setup pytorch / fp16 / inference / nchw / "
                      "tensorrt ran in training only on GPUs with compute_capability 5.3-7.2 (this GPU: 8.9)")
    # a GPU inside the setup's range, and a setup that ran on this very GPU: not flagged
    assert got[1] == got[2] == ""
    assert interval_escalations(joined, meta)["setup"].tolist() == [True, False, False]
    # a model from before the rule (no ranges in its metadata) flags nothing
    assert (extrapolation_reasons(joined, {"training_settings": meta["training_settings"]}) == "").all()
