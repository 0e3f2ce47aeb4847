"""Rank GPUs for one CNN: predicted latency, throughput, roofline bound and conformal interval per GPU x batch."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from src.features.engineer import engineer
from src.features.extrapolation import interval_escalations
from src.features.intervals import cnn_key, row_quantiles
from src.features.served import known_cnns, predict_frame
from src.predict import conformal
from src.predict.cnn import CnnFeatures
from src.predict.gpus import GpuSelection
from src.predict.model import LoadedModel

SPEC_COLUMNS = ["architecture", "compute_capability", "memory_size_gb", "memory_bandwidth_gbs", "tensor_fp16_tflops",
                "fp32_tflops", "sm_count"]


@dataclass
class RankResult:
    table: pd.DataFrame
    timings: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def request_frame(cnn: CnnFeatures, gpus: pd.DataFrame, batch_sizes: list[int], precision: str, mode: str,
                  layout: str, compile_mode: str, framework: str = "pytorch", framework_version: str = "unknown",
                  family: str | None = None) -> pd.DataFrame:
    """One request row per GPU x batch size, in the served model's human-level columns.

    Categorical columns a model does not use are harmless (the Pipeline selects its input columns). The CNN
    family defaults to the ingest's rule on the model name (DenseNet121 -> densenet); models that treat family
    and framework version as open categories encode unseen values as unknown.
    """
    from src.ingest.models import model_family

    family = family or model_family(cnn.name)
    bad = [b for b in batch_sizes if int(b) != b or b < 1]
    if bad:
        raise ValueError(f"batch sizes must be whole numbers >= 1, got {bad}")
    twice = {int(b): n for b, n in Counter(int(b) for b in batch_sizes).items() if n > 1}
    if twice:
        raise ValueError("batch sizes must be distinct: " + ", ".join(f"{b} given {n} times" for b, n in twice.items()))
    # model_key names the CNN's kernel profile for models with the physics estimate (an unknown name is priced
    # from the whole-network numbers); other models ignore it.
    rows = [{"gpu": g, "model_key": cnn.name, "param_count_m": cnn.param_count_m, "gmacs": cnn.gmacs,
             "activations_m": cnn.activations_m,
             "batch_size": int(b), "img_size": int(cnn.img_size), "precision": precision, "mode": mode,
             "memory_layout": layout, "compile_mode": compile_mode, "framework": framework,
             "framework_version": framework_version, "family": family}
            for b in batch_sizes for g in gpus["gpu"]]
    return pd.DataFrame(rows)


def resolve_cnn(model: LoadedModel, cnn: CnnFeatures) -> tuple[CnnFeatures, list[str], bool]:
    """`cnn` under the name the model knows it by (`ResNet50` or `Resnet-50` -> `resnet50`: case and
    separators aside, as the served request's `model_key`, src/features/request.py `KnownCnns`), with notes when
    renamed or when its GMACs contradict the known CNN's (more than GMACS_TOLERANCE apart: every answer is then
    flagged in `extrapolation`, as served), and whether they do (such a CNN is neither the known one nor a measured
    one: its interval is an unseen CNN's); RequestError when the name matches two known CNNs."""
    known = known_cnns(model.pipeline) if "model_key" in model.meta.get("input_columns", []) else None
    if not known:
        return cnn, [], False
    name = known.resolve(cnn.name, "--model")
    notes = []
    if name != cnn.name:
        notes.append(f"CNN name {cnn.name!r} is the model's known CNN {name!r} (case and separators aside)")
    why = known.contradiction(name, cnn.img_size, cnn.gmacs)
    if why:
        notes.append(f"--{why}; every answer says so in `extrapolation` (give --model another name for a "
                     "different CNN)")
    return (replace(cnn, name=name) if name != cnn.name else cnn), notes, bool(why)


def calibrated_levels(cal: dict | None) -> list[str]:
    """The levels a calibration holds quantiles for ("0.80", "0.90"), sorted."""
    return sorted({lv for qs in ((cal or {}).get("quantiles") or {}).values() if isinstance(qs, dict) for lv in qs})


def check_level(cal: dict | None, level: float) -> None:
    """ValueError unless `level` is a finite number in (0, 1) that the calibration holds (none: any such level)."""
    if not (0.0 < level < 1.0):  # NaN fails too
        raise ValueError(f"--level {level:g} must be a number between 0 and 1 (e.g. 0.9)")
    levels = calibrated_levels(cal)
    if cal and f"{level:.2f}" not in levels:
        raise ValueError(f"--level {level:g} is not calibrated; calibrated levels: "
                         f"{', '.join(f'{float(lv):g}' for lv in levels)}")


def predict_answers(model: LoadedModel, request: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    """The served answer (latency in the target unit, `in_training_range`, `extrapolation`, memory columns) through
    the pyfunc's own validation + Pipeline, with any GPUs' spec rows: the same path as `mlflow models serve`."""
    table = gpus[["gpu"] + list(model.meta["gpu_features"])]
    return predict_frame(model.pipeline, table, model.meta, request)


def predict_latency(model: LoadedModel, request: pd.DataFrame, gpus: pd.DataFrame) -> np.ndarray:
    """Latency (target unit) of `predict_answers`."""
    return predict_answers(model, request, gpus)[model.meta["output"]].to_numpy(dtype=float)


def rank(model: LoadedModel, cnn: CnnFeatures, selection: GpuSelection, batch_sizes: list[int],
         precision: str = "amp_fp16", mode: str = "inference", layout: str = "nchw", compile_mode: str = "eager",
         level: float = 0.9, cnn_seen: bool | None = None, framework: str = "pytorch",
         framework_version: str = "unknown", family: str | None = None) -> RankResult:
    """Predict every (GPU, batch) pair and rank GPUs by latency within each batch size.

    `cnn_seen`: whether the CNN is in the model's training data (None: decided from the calibration's list of
    training model keys by name, and unseen where the CNN's GMACs contradict the known CNN of that name, as the
    served answer decides). It picks the conformal quantile (row / gpu / cnn / gpu_cnn novelty).
    """
    if model.meta.get("output") != "latency_ms":
        raise ValueError(f"model {model.uri} predicts {model.meta.get('output')!r}; ranking needs a latency_ms model")
    check_level(model.conformal, level)
    cnn, notes, contradicted = resolve_cnn(model, cnn)
    gpus = selection.features
    t0 = time.perf_counter()
    req = request_frame(cnn, gpus, batch_sizes, precision, mode, layout, compile_mode, framework,
                        framework_version, family)
    answers = predict_answers(model, req, gpus)
    lat = answers[model.meta["output"]].to_numpy(dtype=float)
    t_pred = time.perf_counter() - t0

    joined = req.merge(gpus, on="gpu", how="left")
    roof = engineer(joined)
    out = pd.DataFrame({
        "gpu": req["gpu"], "batch_size": req["batch_size"].astype(int),
        "latency_ms": lat, "throughput_per_s": req["batch_size"].to_numpy() / lat * 1e3,
        "roofline_ms": roof["t_roofline_ms"].to_numpy(),
        "bound": np.where(roof["t_compute_ms"] >= roof["t_memory_ms"], "compute", "memory"),
    })
    out["roofline_fraction"] = out["roofline_ms"] / out["latency_ms"]
    # why an answer lies outside what the model was trained on (a GPU known only by its specs, a value beyond the
    # training range, a setup or release no training row ran), as the served model says it
    out["in_training_range"] = answers["in_training_range"].to_numpy(dtype=bool)
    out["extrapolation"] = answers["extrapolation"].to_numpy(dtype=object)
    # whether the step's working set fits the GPU's memory, as the served answer says (a lower bound for inference)
    for col in ("fits_in_memory", "memory_needed_gb", "gpu_memory_gb"):
        if col in answers.columns:
            out[col] = answers[col].to_numpy()
    cal = model.conformal
    notes = list(notes)
    # the calibration's training GPUs (they pick the interval), else the served model's own list
    train_gpus = set(cal.get("train_gpus", [])) if cal else set(model.meta.get("training_gpus") or [])
    out["gpu_in_training"] = out["gpu"].isin(train_gpus) if train_gpus else np.nan
    if cnn_seen is None:
        keys = {cnn_key(k) for k in (cal.get("train_model_keys", []) if cal else [])}
        cnn_seen = cnn_key(cnn.name) in keys and not contradicted
    if cal:
        kinds = np.array([conformal.novelty(bool(g), bool(cnn_seen)) for g in out["gpu_in_training"]], dtype=object)
        # raised where the GPU's specs lie outside the training range or the runtime is new, as the served answer
        unseen = model.pipeline.unseen(joined) if hasattr(model.pipeline, "unseen") else None
        qs, used = row_quantiles(cal, kinds, level, interval_escalations(joined, model.meta, unseen))
        out["interval_kind"] = used
        out["latency_lo_ms"] = out["latency_ms"] * np.exp(-qs)
        out["latency_hi_ms"] = out["latency_ms"] * np.exp(qs)
        out["throughput_lo_per_s"] = out["batch_size"] / out["latency_hi_ms"] * 1e3
        out["throughput_hi_per_s"] = out["batch_size"] / out["latency_lo_ms"] * 1e3
    else:
        notes.append("no conformal calibration found for this model: intervals are empty; run "
                     "`python -m src.predict calibrate --model-uri <uri>` once")
        for c in ("interval_kind", "latency_lo_ms", "latency_hi_ms", "throughput_lo_per_s", "throughput_hi_per_s"):
            out[c] = np.nan
    if "fits_in_memory" in out.columns and not out["fits_in_memory"].all():
        short = out.loc[~out["fits_in_memory"].astype(bool)]
        notes.append(f"{len(short)} of {len(out)} answers need more memory than the GPU has ({short['gpu'].nunique()} "
                     "GPU(s)); the CSV's `fits_in_memory`, `memory_needed_gb` and `gpu_memory_gb` columns say which")
    if not out["in_training_range"].all():
        notes.append(f"{int((~out['in_training_range']).sum())} of {len(out)} answers lie outside what the model was "
                     "trained on; the CSV's `extrapolation` column says why for each")
    out["interval_level"] = level
    out["runtime"], out["precision"] = compile_mode, precision  # the CSV names the deployment it ranks for
    out = out.merge(gpus[["gpu"] + [c for c in SPEC_COLUMNS if c in gpus.columns]], on="gpu", how="left")
    out["rank"] = out.groupby("batch_size")["latency_ms"].rank(method="first").astype(int)
    out = out.sort_values(["batch_size", "rank"]).reset_index(drop=True)
    first = ["batch_size", "rank", "gpu", "latency_ms", "latency_lo_ms", "latency_hi_ms", "throughput_per_s",
             "throughput_lo_per_s", "throughput_hi_per_s", "roofline_ms", "bound", "roofline_fraction",
             "gpu_in_training", "in_training_range", "extrapolation", "interval_kind", "interval_level", "runtime",
             "precision", *[c for c in ("fits_in_memory", "memory_needed_gb", "gpu_memory_gb") if c in out.columns]]
    out = out[first + [c for c in out.columns if c not in first]]
    n = len(gpus)
    timings = {"predict_seconds": t_pred, "n_gpus": n, "n_rows": len(req),
               "predict_seconds_per_gpu": t_pred / max(n, 1)}
    return RankResult(out, timings, notes)
