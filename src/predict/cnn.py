"""The CNN side of a design-space query: static features from explicit numbers, the model zoo, or an ONNX file.

Why three routes: the core venv has no Keras/torchvision, so the zoo's heavy frameworks may live in a separate
venv (.venv-zoo); explicit numbers (params, GMACs, activations) always work; an ONNX file goes through the zoo.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
ZOO_PYTHON_ENV = "CNNPERF_ZOO_PYTHON"
DEFAULT_ZOO_PYTHON = REPO_ROOT / ".venv-zoo" / "bin" / "python"
STATIC_KEYS = ("param_count_m", "gmacs", "activations_m")


class CnnSpecError(ValueError):
    """The CNN could not be described: bad numbers, unknown model, or no framework able to build it."""


@dataclass
class CnnFeatures:
    """Static features of one CNN at one input size (per image, batch 1) and where they came from."""

    name: str
    source: str
    img_size: int
    param_count_m: float
    gmacs: float
    activations_m: float
    route: str  # "explicit", "zoo-inprocess", "zoo-subprocess"
    extraction_seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    zoo_name: str = ""  # the name (or ONNX path) the zoo builds it from; empty for explicit numbers

    def as_dict(self) -> dict:
        return asdict(self)


def _check_positive(values: dict[str, float], where: str) -> None:
    for k, v in values.items():
        try:
            f = float(v)
        except (TypeError, ValueError) as exc:
            raise CnnSpecError(f"{where}: {k}={v!r} is not a number") from exc
        if not (f > 0 and f < float("inf")):
            raise CnnSpecError(f"{where}: {k}={v!r} must be a finite number > 0")


def from_explicit(name: str, params_m: float, gmacs: float, activations_m: float, img_size: int) -> CnnFeatures:
    """A CNN given by its numbers (parameters in millions, GMACs and activations in millions per image)."""
    _check_positive({"params_m": params_m, "gmacs": gmacs, "activations_m": activations_m, "img_size": img_size},
                    "explicit CNN features")
    return CnnFeatures(name or "custom", "explicit", int(img_size), float(params_m), float(gmacs),
                       float(activations_m), "explicit")


def from_known(numbers: dict[str, list[list[float]]], name: str, img_size: int | None) -> CnnFeatures | None:
    """A CNN the model was trained on, by the numbers its training rows carry (the served metadata's
    `known_cnn_numbers`: model_key -> [[img_size, params_m, gmacs, activations_m], ...]): `--model resnet50` alone
    then needs neither the zoo nor the user's numbers. `img_size` None: the size the model has most rows of (the
    first listed); a size the CNN was not measured at, or a name the model does not know: None."""
    sizes = numbers.get(name)
    if not sizes:
        return None
    pick = sizes[0] if img_size is None else next((s for s in sizes if int(s[0]) == int(img_size)), None)
    if pick is None:
        return None
    size, params_m, gmacs, activations_m = pick
    out = from_explicit(name, params_m, gmacs, activations_m, int(size))
    out.source, out.route = "model", "known"
    return out


def _zoo_inprocess(source: str, model: str, img_size: int | None) -> dict:
    from src.zoo.resolve import build
    from src.zoo.static import static_features

    return static_features(build(source, model, img_size))


_SUBPROCESS_CODE = (
    "import json,sys,time\n"
    "t0=time.perf_counter()\n"
    "from src.zoo.resolve import build\n"
    "from src.zoo.static import static_features\n"
    "t1=time.perf_counter()\n"
    "s=sys.argv[3]\n"
    "f=static_features(build(sys.argv[1], sys.argv[2], int(s) if s else None))\n"
    "f['zoo_import_seconds']=t1-t0\n"
    "f['zoo_build_and_count_seconds']=time.perf_counter()-t1\n"
    "print('@@ZOO@@'+json.dumps(f, default=str))\n"
)


def zoo_python() -> Path | None:
    """Interpreter of the zoo venv ($CNNPERF_ZOO_PYTHON, else <repo>/.venv-zoo/bin/python) if it exists."""
    p = Path(os.environ.get(ZOO_PYTHON_ENV) or DEFAULT_ZOO_PYTHON)
    return p if p.exists() else None


def _run_zoo(python: Path, code: str, source: str, model: str, *args: str) -> str:
    """Run `code` in the zoo venv; its payload is the last stdout line after the @@ZOO@@ marker."""
    proc = subprocess.run([str(python), "-c", code, source, model, *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    marker = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@ZOO@@")]
    if proc.returncode != 0 or not marker:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise CnnSpecError(f"zoo ({python}) could not build {source}:{model}: {' | '.join(tail)}")
    return marker[-1][len("@@ZOO@@"):]


def _zoo_subprocess(python: Path, source: str, model: str, img_size: int | None) -> dict:
    return json.loads(_run_zoo(python, _SUBPROCESS_CODE, source, model, str(img_size or "")))


_LAYERS_CODE = (
    "import sys\n"
    "from src.zoo.layers import layer_table\n"
    "s=sys.argv[3]\n"
    "df=layer_table(sys.argv[1], sys.argv[2], int(s) if s else None, passes=tuple(sys.argv[4].split(',')))\n"
    "print('@@ZOO@@'+df.to_json(orient='split', index=False))\n"
)


def layer_rows(source: str, model: str, img_size: int | None, passes: tuple[str, ...]) -> Any:
    """The per-layer table (src/zoo/layers.py; an ONNX file: src/zoo/onnx_layers.py) of the passes asked, built in
    this process when its framework imports, else in the zoo venv. Raises CnnSpecError naming the CNN and why."""
    import io

    import pandas as pd

    try:
        from src.zoo.layers import layer_table

        return layer_table(source, model, img_size, passes=passes)
    except ImportError as exc:
        missing = f"missing here: {exc}"
    except Exception as exc:  # noqa: BLE001 - the zoo's own errors carry the useful message
        if type(exc).__name__ != "MissingFrameworkError":
            raise CnnSpecError(f"no per-layer table for {source}:{model}: {exc}") from exc
        missing = f"missing here: {exc}"
    py = zoo_python()
    if py is None:
        raise CnnSpecError(f"no per-layer table for {source}:{model}: the framework is not installed in this venv "
                           f"({missing}) and no zoo venv was found (set {ZOO_PYTHON_ENV} or create "
                           f"{DEFAULT_ZOO_PYTHON})")
    payload = _run_zoo(py, _LAYERS_CODE, source, model, str(img_size or ""), ",".join(passes))
    return pd.read_json(io.StringIO(payload), orient="split")


def from_zoo(source: str, model: str, img_size: int | None = None) -> CnnFeatures:
    """Static features via src.zoo: in this process when its framework imports, else in the zoo venv.

    Raises CnnSpecError naming the model and the reason (unknown model, framework missing everywhere).
    """
    t0 = time.perf_counter()
    route = "zoo-inprocess"
    try:
        feats = _zoo_inprocess(source, model, img_size)
    except ImportError as exc:  # src.zoo itself or a framework missing here
        feats, route = None, f"missing here: {exc}"
    except Exception as exc:  # noqa: BLE001 - the zoo's own errors carry the useful message
        if type(exc).__name__ != "MissingFrameworkError":
            raise CnnSpecError(f"zoo could not build {source}:{model}: {exc}") from exc
        feats, route = None, f"missing here: {exc}"
    if feats is None:
        py = zoo_python()
        if py is None:
            raise CnnSpecError(
                f"cannot build {source}:{model}: the framework is not installed in this venv ({route}) and no zoo "
                f"venv was found (set {ZOO_PYTHON_ENV} or create {DEFAULT_ZOO_PYTHON}). Alternatively give the "
                "numbers: --params-m P --gmacs G --activations-m A --img-size S")
        feats = _zoo_subprocess(py, source, model, img_size)
        route = "zoo-subprocess"
    missing = [k for k in STATIC_KEYS if feats.get(k) is None]
    if missing:
        raise CnnSpecError(f"zoo result for {source}:{model} lacks {missing}")
    _check_positive({k: feats[k] for k in STATIC_KEYS}, f"zoo result for {source}:{model}")
    extra = {k: v for k, v in feats.items() if k not in STATIC_KEYS and k not in ("model", "source", "img_size")}
    return CnnFeatures(str(feats.get("model", model)), source, int(feats["img_size"]), float(feats["param_count_m"]),
                       float(feats["gmacs"]), float(feats["activations_m"]), route,
                       time.perf_counter() - t0, extra, zoo_name=model)


def describe(args_source: str | None, args_model: str | None, onnx: str | None, params_m: float | None,
             gmacs: float | None, activations_m: float | None, img_size: int | None) -> CnnFeatures:
    """One CNN from whichever route the user chose; exactly one route must be given."""
    explicit = [params_m, gmacs, activations_m]
    has_explicit = any(v is not None for v in explicit)
    # With explicit numbers, --model is only a label; otherwise --model (with --source) names a zoo model.
    routes = {"zoo": bool(args_source) or (bool(args_model) and not has_explicit), "onnx": bool(onnx),
              "explicit": has_explicit}
    chosen = [k for k, v in routes.items() if v]
    if len(chosen) != 1:
        raise CnnSpecError(f"give the CNN one way: --source/--model, --onnx FILE, or --params-m/--gmacs/"
                           f"--activations-m (got {chosen or 'none'})")
    if chosen == ["explicit"]:
        if any(v is None for v in explicit) or img_size is None:
            raise CnnSpecError("explicit features need all of --params-m, --gmacs, --activations-m and --img-size")
        t0 = time.perf_counter()
        out = from_explicit(args_model or "custom", params_m, gmacs, activations_m, img_size)
        out.extraction_seconds = time.perf_counter() - t0
        return out
    if chosen == ["onnx"]:
        if not Path(onnx).exists():
            raise CnnSpecError(f"ONNX file {onnx!r} not found")
        return from_zoo("onnx", str(Path(onnx).resolve()), img_size)
    if not args_source:
        raise CnnSpecError(f"--model {args_model!r} is not a CNN the model was trained on: give --source (keras, "
                           "torchvision, timm) to build it, --onnx FILE, or its numbers (--params-m --gmacs "
                           "--activations-m --img-size)")
    return from_zoo(args_source, args_model, img_size)
