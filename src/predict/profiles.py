"""A CNN nobody measured, priced layer by layer: its kernel profile is built at query time and added to the model.

Why: the served model carries the kernel profiles of the CNNs it was trained on; any other CNN was priced from its
whole-network numbers (parameters, GMACs, activations) and answered by the by-numbers learner, which is about
twice as far off for an architecture held out (xgb, leave_model_out: 9.7 % named, 16.5 % by its numbers;
docs/experiments.md "A CNN described by its numbers"). A CNN the zoo can build, or an ONNX file, has a per-layer
table (src/zoo/layers.py, src/zoo/onnx_layers.py), so it can be priced kernel by kernel exactly as a measured CNN
is: the profile is made by the same `kernel_profiles` the `features` stage uses and added to the model's
`ProfileIndex` in this process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from src.features.baseline import profile_indexes
from src.features.kernels import LAYER_COLUMNS, kernel_profiles
from src.features.layer_physics import PASSES_BY_MODE
from src.predict.cnn import CnnFeatures, CnnSpecError, layer_rows


@dataclass
class ProfileOutcome:
    """What happened to the CNN's profile: `status` known | added | by_numbers, and why, for the report."""

    status: str
    note: str
    seconds: float = 0.0
    kernels: int = 0


def attach_layer_profile(pipeline, cnn: CnnFeatures, mode: str) -> ProfileOutcome:
    """Make `pipeline` price `cnn` layer by layer in `mode` (inference / training) if it can; never raises for a
    CNN that has no per-layer table (the answer is then priced by its numbers, and the outcome says why)."""
    indexes = profile_indexes(pipeline)
    if not indexes:
        return ProfileOutcome("by_numbers", "the model has no physics estimate: it prices every CNN by its numbers")
    if mode not in PASSES_BY_MODE:
        raise ValueError(f"mode {mode!r}: expected one of {sorted(PASSES_BY_MODE)}")
    if all(ix.has(cnn.name, cnn.img_size, mode) for ix in indexes):
        return ProfileOutcome("known", f"{cnn.name} at {cnn.img_size} px: the model's own kernel profile")
    if not cnn.zoo_name:
        return ProfileOutcome("by_numbers", f"{cnn.name}: given by its numbers only, so priced from them (a zoo "
                                            "name or an ONNX file would price it layer by layer)")
    if cnn.source == "onnx" and mode != "inference":
        return ProfileOutcome("by_numbers", f"{cnn.name}: an ONNX file is an inference graph, so a {mode} step is "
                                            "priced by its whole-network numbers")
    t0 = time.perf_counter()
    try:
        layers = layer_rows(cnn.source, cnn.zoo_name, cnn.img_size, PASSES_BY_MODE[mode])
    except CnnSpecError as exc:
        return ProfileOutcome("by_numbers", f"{exc}; priced by its whole-network numbers instead",
                              time.perf_counter() - t0)
    layers = layers.assign(model_key=cnn.name, img_size=int(cnn.img_size))
    profiles = kernel_profiles(layers[LAYER_COLUMNS], f"per-layer table of {cnn.source}:{cnn.name}")
    for index in indexes:
        index.add(profiles)
    launched = int(layers["launches_kernel"].astype(bool).sum())
    unclassified = sorted({str(op) for op, kind in zip(layers["op"], layers["kind"], strict=True)
                           if kind == "other"})
    extra = f"; op types priced by their bytes only: {unclassified}" if unclassified else ""
    return ProfileOutcome("added", f"{cnn.name} at {cnn.img_size} px: not in the training data, priced layer by "
                                   f"layer from its {launched} kernels ({cnn.source} per-layer table){extra}",
                          time.perf_counter() - t0, launched)
