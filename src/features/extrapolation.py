"""Why an answer lies outside what the served model was trained on: the `extrapolation` column of every answer.

An unmeasured GPU, an input or GPU spec beyond the training range, a CNN without PTX counts, a runtime or setup no
training row had: the model still answers (a designer asks about GPUs nobody measured), and says why the answer
is an extrapolation instead of refusing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .engineer import factorize, lookup
from .request import OPTIONAL_DEFAULTS

# A request's measurement setup (with `framework_version`, its setting): src.train.protocols.SETTING_COLUMNS but the
# source, which a request does not name. Held out, rows whose setup no training row had were 1.5-3.6x as far off as
# rows of a seen setting (xgb, grouped protocols; docs/experiments.md, the results at commit 13df178), so an answer
# for an untrained setup or a named untrained release says so in `extrapolation`.
SETUP_FIELDS = ("framework", "precision", "mode", "memory_layout", "compile_mode")
RELEASE_FIELD = "framework_version"


def extrapolation_reasons(joined: Mapping[str, Any], meta: dict, ptx_index=None,
                          unseen: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """Per row, why the answer lies outside what the model was trained on ('' when inside): a GPU nobody measured,
    a numeric input or GPU spec beyond the training range (e.g. a GPU faster than any measured one), a CNN
    without PTX counts for a model that uses them (`ptx_index`: its counts were imputed from GMACs), a runtime or
    precision class no training row had (`unseen`: column -> row mask; answered by the bare physics estimate), a
    setup or named release no training row had (`training_settings` of the metadata: `setting_reasons`)."""
    gpu = np.asarray(joined["gpu"], dtype=object)
    reasons = np.full(len(gpu), "", dtype=object)

    def add(mask: np.ndarray, text: Any) -> None:
        sel = np.flatnonzero(mask)
        if sel.size:
            now = reasons[sel]
            reasons[sel] = np.where(now == "", text, now + "; " + text)

    trained = set(meta.get("training_gpus") or [])
    if trained:
        add(lookup(gpu, lambda g: float(g in trained)) == 0.0, "GPU not in the training data")
    for col, (lo, hi) in (meta.get("training_ranges") or {}).items():
        if col not in joined:
            continue
        v = np.asarray(joined[col], dtype=float)
        bad = (v < lo) | (v > hi)
        if bad.any():
            uniq, inv = np.unique(v[bad], return_inverse=True)
            texts = np.array([f"{col} {u:g} outside the training range [{lo:g}, {hi:g}]" for u in uniq], dtype=object)
            add(bad, texts[inv.ravel()])
    if ptx_index is not None:
        keys, sizes = np.asarray(joined["model_key"], dtype=object), np.asarray(joined["img_size"], dtype=float)
        missing = ~ptx_index.has(keys, sizes)
        if missing.any():
            texts = np.array([f"no PTX counts for CNN {k!r} at {int(z)} px: imputed from its GMACs"
                              for k, z in zip(keys[missing], sizes[missing], strict=True)], dtype=object)
            add(missing, texts)
    for col, mask in (unseen or {}).items():
        values = np.asarray(joined[col], dtype=object)[mask]
        # the fallback's constant is the median training efficiency or, with target.point=mape (the pipeline's),
        # the efficiency that minimises the training rows' MAPE (src/features/baseline.py `fallback_point`)
        add(mask, np.array([f"{col} {v!r} has no training rows of its kind: bare physics estimate x one constant "
                            "training efficiency (the unseen-kind fallback)" for v in values], dtype=object))
    setting = setting_reasons(joined, meta.get("training_settings") or [])
    add(setting != "", setting[setting != ""])
    beyond = setup_gpu_reasons(joined, meta.get("setup_gpu_ranges") or [])
    add(beyond != "", beyond[beyond != ""])
    unsupported = precision_support_reasons(joined, meta.get("unit_fallback_precisions"))
    add(unsupported != "", unsupported[unsupported != ""])
    return reasons


# Per precision: the lowest compute capability with the math units the precision is meant for, what they are, and
# the rate the estimate falls back to below it (src/features/physics.py `peak_tflops`; int8: dp4a from 6.1).
PRECISION_UNITS = {
    "bf16": (8.0, "bf16 tensor cores", "its fp32 rate"),
    "amp_bf16": (8.0, "bf16 tensor cores", "its fp32 rate"),
    "tf32": (8.0, "TF32 tensor cores", "its fp32 rate"),
    "fp16": (7.0, "fp16 tensor cores", "the better of its fp16 and fp32 CUDA-core rates"),
    "amp_fp16": (7.0, "fp16 tensor cores", "the better of its fp16 and fp32 CUDA-core rates"),
    "int8": (6.1, "int8 dot-product instructions (dp4a) or tensor cores", "its fp32 rate"),
}


def lacks_units(precision: Any, compute_capability: Any) -> np.ndarray:
    """Rows whose GPU lacks the math units their precision is meant for (PRECISION_UNITS)."""
    prec = np.asarray(precision, dtype=object).astype(str)
    cc = np.asarray(compute_capability, dtype=float)
    lowest = np.zeros(len(prec))
    for name, (need, _, _) in PRECISION_UNITS.items():
        lowest[prec == name] = need
    return cc < lowest


def unit_fallback_precisions(frame: pd.DataFrame) -> list[str]:
    """The precisions some training row ran on a GPU without their units (fp16 on Pascal in ryujaehun's and
    DLInfBench's tables, on the Jetson Nano in torch2trt's): what the served model carries so that it flags only
    the pairs no training row had."""
    if "precision" not in frame.columns or "compute_capability" not in frame.columns:
        return []
    mask = lacks_units(frame["precision"], frame["compute_capability"])
    return sorted(frame.loc[mask, "precision"].astype(str).unique().tolist())


def precision_support_reasons(joined: Mapping[str, Any], trained: list[str] | None = None) -> np.ndarray:
    """Per row, '' or why the GPU lacks the units its precision is meant for (bf16 on a Turing T4, int8 before
    dp4a): the framework still runs it, slower, and the estimate prices it at the fallback rate (PRECISION_UNITS),
    but no training row ran that precision on such a GPU. `trained`: the precisions training rows did run without
    their units (`unit_fallback_precisions`, the model's metadata), not flagged; None (a model from before this
    rule) flags every such pair. Needs `precision` and `compute_capability` in `joined` (else nothing is flagged)."""
    n = len(np.asarray(joined["gpu"]))
    out = np.full(n, "", dtype=object)
    if "precision" not in joined or "compute_capability" not in joined:
        return out
    prec = np.asarray(joined["precision"], dtype=object).astype(str)
    cc = np.asarray(joined["compute_capability"], dtype=float)
    gpu = np.asarray(joined["gpu"], dtype=object)
    flagged = lacks_units(prec, cc) & ~np.isin(prec, list(trained or []))
    for name, (lowest, units, fallback) in PRECISION_UNITS.items():
        rows = np.flatnonzero(flagged & (prec == name))
        if not rows.size:
            continue
        names, inv = np.unique(gpu[rows].astype(str), return_inverse=True)  # one text per GPU, not per row
        first = rows[np.unique(inv, return_index=True)[1]]
        texts = np.array([f"GPU {str(g)!r} (compute capability {cc[i]:g}) has no {units} for precision {name!r} "
                          f"(they need {lowest:g}+): priced at {fallback}; no training row ran {name!r} on such a GPU"
                          for g, i in zip(names, first, strict=True)], dtype=object)
        out[rows] = texts[inv.ravel()]
    return out
    prec = np.asarray(joined["precision"], dtype=object).astype(str)
    cc = np.asarray(joined["compute_capability"], dtype=float)
    gpu = np.asarray(joined["gpu"], dtype=object)
    for name, (lowest, units, fallback) in PRECISION_UNITS.items():
        rows = np.flatnonzero((prec == name) & (cc < lowest))
        if not rows.size:
            continue
        names, inv = np.unique(gpu[rows].astype(str), return_inverse=True)  # one text per GPU, not per row
        first = rows[np.unique(inv, return_index=True)[1]]
        texts = np.array([f"GPU {str(g)!r} (compute capability {cc[i]:g}) has no {units} for precision {name!r} "
                          f"(they need {lowest:g}+): priced at {fallback}" for g, i in zip(names, first, strict=True)],
                         dtype=object)
        out[rows] = texts[inv.ravel()]
    return out


def known_cnn_reasons(joined: Mapping[str, Any], cnns) -> np.ndarray:
    """Per row, '' or why its numbers contradict the known CNN its `model_key` names (`request.KnownCnns`: `gmacs`
    more than GMACS_TOLERANCE from the CNN's kernel profile at the row's img_size). The answer prices the profile
    and the numbers sent together, so it is neither CNN's: it is flagged, not refused (docs/predict.md)."""
    n = len(np.asarray(joined["gpu"]))
    out = np.full(n, "", dtype=object)
    if not cnns or any(c not in joined for c in ("model_key", "img_size", "gmacs")):
        return out
    keys = np.asarray(joined["model_key"], dtype=object)
    named = np.flatnonzero(np.isin(keys, cnns.name_array))
    if not named.size:
        return out
    key, size = keys[named], np.asarray(joined["img_size"], dtype=float)[named]
    gmacs = np.asarray(joined["gmacs"], dtype=float)[named]
    codes, _ = pd.MultiIndex.from_arrays([key, size, gmacs]).factorize()
    _, first = np.unique(codes, return_index=True)
    texts = np.array([cnns.contradiction(str(key[i]), int(size[i]), float(gmacs[i])) or "" for i in first],
                     dtype=object)
    out[named] = texts[codes]
    return out


def training_ranges(df: pd.DataFrame, columns: list[str]) -> dict[str, list[float]]:
    """[min, max] of each numeric input over the rows a model was trained on: outside, an answer extrapolates."""
    return {col: [float(df[col].min()), float(df[col].max())] for col in columns if col in df.columns}


def beyond_range(joined: Mapping[str, Any], meta: dict, columns: list[str] | tuple[str, ...]) -> np.ndarray:
    """Rows with a value of any of `columns` outside the model's training range (`training_ranges` of the
    metadata; a column without a range or absent from the request counts as inside)."""
    out = np.zeros(len(np.asarray(joined["gpu"])), dtype=bool)
    ranges = meta.get("training_ranges") or {}
    for col in columns:
        if col in ranges and col in joined:
            lo, hi = ranges[col]
            v = np.asarray(joined[col], dtype=float)
            out |= (v < lo) | (v > hi)
    return out


def interval_escalations(joined: Mapping[str, Any], meta: dict,
                         unseen: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Which rows the served interval widens beyond their GPU/CNN novelty (src/features/intervals.py ESCALATIONS):
    "arch", a GPU with a spec outside the training range (a generation faster or slower than any measured one;
    a new GPU inside the range keeps the `gpu` kind), "runtime", a runtime or precision class no training row had
    (`unseen`, the rows the bare estimate answers), and "setup", a setup no training row ran (`untrained_setups`
    against the metadata's `training_settings`; a model without them flags none) or ran only on GPUs of another
    class (`setup_gpu_reasons`)."""
    n = len(np.asarray(joined["gpu"]))
    masks = list((unseen or {}).values())
    return {"arch": beyond_range(joined, meta, meta.get("gpu_features") or []),
            "runtime": np.logical_or.reduce(masks) if masks else np.zeros(n, dtype=bool),
            "setup": untrained_setups(joined, meta.get("training_settings") or [])
            | (setup_gpu_reasons(joined, meta.get("setup_gpu_ranges") or []) != "")}


def training_settings(frame: pd.DataFrame) -> list[list[str]]:
    """The distinct settings (SETUP_FIELDS + framework_version, as text) of the rows a model was trained on, sorted:
    what the served model carries to flag answers for a setup or release no training row had."""
    cols = [*SETUP_FIELDS, RELEASE_FIELD]
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise KeyError(f"training rows lack the setting column(s) {missing}")
    return sorted(frame[cols].astype(str).drop_duplicates().values.tolist())


def _keys(joined: Mapping[str, Any], cols: tuple[str, ...] | list[str]) -> np.ndarray:
    out = np.asarray(joined[cols[0]], dtype=object).astype(str)
    for c in cols[1:]:
        out = np.char.add(np.char.add(out, "\x1f"), np.asarray(joined[c], dtype=object).astype(str))
    return np.asarray(out, dtype=object)


def setup_labels(frame: Mapping[str, Any]) -> np.ndarray:
    """Each row's setup (SETUP_FIELDS) as one text label: what the `setup` calibration folds and the served rule
    compare."""
    return _keys(frame, list(SETUP_FIELDS))


def untrained_setups(joined: Mapping[str, Any], settings: list[list[str]]) -> np.ndarray:
    """Rows whose setup (SETUP_FIELDS together; the release aside) no training setting had. None flagged without
    `settings` or where the request lacks a setup field (as `setting_reasons`)."""
    n = len(np.asarray(joined["gpu"]))
    if not settings or any(c not in joined for c in SETUP_FIELDS):
        return np.zeros(n, dtype=bool)
    trained = np.array(sorted({"\x1f".join(s[: len(SETUP_FIELDS)]) for s in settings}), dtype=object)
    codes, uniq = factorize(setup_labels(joined))
    return ~np.isin(np.asarray(uniq, dtype=object), trained)[codes]


def setting_reasons(joined: Mapping[str, Any], settings: list[list[str]]) -> np.ndarray:
    """Per row, '' or why its setting is not one the model was trained on: a setup (framework, precision, mode,
    layout, runtime) no training row had, or a named framework release no training row ran in that setup (an
    `unknown` release is not flagged: most requests do not name one)."""
    if not settings or any(c not in joined for c in (*SETUP_FIELDS, RELEASE_FIELD)):
        return np.full(len(np.asarray(joined["gpu"])), "", dtype=object)
    width = len(SETUP_FIELDS)
    setups = {"\x1f".join(s[:width]) for s in settings}
    releases: dict[str, list[str]] = {}
    for s in settings:
        releases.setdefault("\x1f".join(s[:width]), []).append(s[width])
    codes, uniq = factorize(_keys(joined, [*SETUP_FIELDS, RELEASE_FIELD]))
    texts = np.full(len(uniq), "", dtype=object)
    for k, key in enumerate(uniq.tolist()):
        *setup, release = key.split("\x1f")
        joined_setup = "\x1f".join(setup)
        if joined_setup not in setups:
            texts[k] = "no training row ran this setup (" + ", ".join(
                f"{f} {v}" for f, v in zip(SETUP_FIELDS, setup, strict=True)) + ")"
        elif release != OPTIONAL_DEFAULTS[RELEASE_FIELD] and release not in releases[joined_setup]:
            texts[k] = (f"framework_version {release!r} has no training rows in this setup (trained: "
                        f"{sorted(releases[joined_setup])})")
    return texts[codes]


# The GPU specs whose per-setup training range `setup_gpu_ranges` records: a setup measured only on Jetson boards
# (torch2trt's PyTorch + TensorRT fp16 rows) says little about a 1 TB/s desktop GPU in that setup.
SETUP_GPU_SPECS = ("memory_bandwidth_gbs", "compute_capability")


def setup_gpu_ranges(frame: pd.DataFrame) -> list[dict]:
    """Per setup (SETUP_FIELDS) of the training rows, the [min, max] of each SETUP_GPU_SPECS column over the GPUs
    it ran on: what the served model carries so that an answer for a trained setup on a GPU far outside the GPUs
    that setup ran on says so. Empty where the frame lacks a column."""
    cols = [*SETUP_FIELDS, *SETUP_GPU_SPECS]
    if any(c not in frame.columns for c in cols):
        return []
    grouped = frame[cols].astype({c: str for c in SETUP_FIELDS}).groupby(list(SETUP_FIELDS), sort=True)
    lo, hi = grouped.min(), grouped.max()
    return [{"setup": list(key), "ranges": {c: [float(lo.loc[key, c]), float(hi.loc[key, c])] for c in SETUP_GPU_SPECS}}
            for key in lo.index]


def setup_gpu_reasons(joined: Mapping[str, Any], ranges: list[dict]) -> np.ndarray:
    """Per row, '' or why its (trained) setup never ran on a GPU like the row's: a SETUP_GPU_SPECS value outside
    the range of the GPUs that setup's training rows ran on (`setup_gpu_ranges` of the metadata; none recorded or
    a setup without training rows: '', the latter is `setting_reasons`' to say)."""
    n = len(np.asarray(joined["gpu"]))
    out = np.full(n, "", dtype=object)
    if not ranges or any(c not in joined for c in (*SETUP_FIELDS, *SETUP_GPU_SPECS)):
        return out
    by_setup = {"\x1f".join(r["setup"]): r["ranges"] for r in ranges}
    codes, uniq = factorize(setup_labels(joined))
    for k, label in enumerate(np.asarray(uniq, dtype=object).tolist()):
        spans = by_setup.get(label)
        if spans is None:
            continue
        rows = np.flatnonzero(codes == k)
        for col in SETUP_GPU_SPECS:
            (lo, hi), v = spans[col], np.asarray(joined[col], dtype=float)[rows]
            bad = rows[(v < lo) | (v > hi)]
            if bad.size:
                setup = " / ".join(label.split("\x1f"))
                text = f"setup {setup} ran in training only on GPUs with {col} {lo:g}-{hi:g} (this GPU: "
                vals = np.asarray(joined[col], dtype=float)[bad]
                uniq_v, inv = np.unique(vals, return_inverse=True)
                texts = np.array([f"{text}{u:g})" for u in uniq_v], dtype=object)[inv.ravel()]
                now = out[bad]
                out[bad] = np.where(now == "", texts, now + "; " + texts)
    return out
