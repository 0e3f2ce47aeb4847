"""The fitted Pipeline replayed on NumPy arrays (`FastPipeline`), for the served model's fixed cost per call.

Why: a design-space explorer or a NAS loop calls the model thousands of times with one or a few rows, so the fixed
cost per call matters more than the cost per row. The replay runs the same steps with the same arithmetic, without
per-column pandas frames or joblib dispatch; a model whose shape it does not recognise goes through
`pipeline.predict` (compile_pipeline returns None).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .batch_monotone import monotone_in_batch
from .engineer import onehot_block, onehot_tables

log = logging.getLogger("cnnperf.serve")


class UnsupportedPipeline(TypeError):
    """The fitted model is not of the shape FastPipeline replays; predictions go through pipeline.predict."""


def inner_pipeline(model) -> tuple[str, Any]:
    """('baseline' | 'log' | 'plain', the inner features + estimator Pipeline)."""
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.pipeline import Pipeline

    from .baseline import PhysicsBaselineRegressor

    if isinstance(model, PhysicsBaselineRegressor):
        return "baseline", model.regressor_
    if isinstance(model, TransformedTargetRegressor):
        return "log", model.regressor_
    if isinstance(model, Pipeline):
        return "plain", model
    raise UnsupportedPipeline(type(model).__name__)


class FastPipeline:
    """`model.predict` for the Pipelines src/train/estimators.py builds, on NumPy arrays, same arithmetic.

    Steps replayed: PerfFeatures.transform_arrays (the code behind PerfFeatures.transform); the ColumnTransformer
    as its scaler (x - mean) / scale or passthrough, then one-hot blocks read from tables the fitted encoder itself
    produced for each known category and for an unknown value; the estimator's own predict; the target wrapper
    (exp(f) x physics estimate, exp(f), or f). Why: the generic path builds a DataFrame per column and dispatches
    the ColumnTransformer through joblib on every call, ~30x the cost of the arithmetic for one row.
    """

    def __init__(self, model):
        from sklearn.compose import TransformedTargetRegressor
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

        from .engineer import PerfFeatures

        self.kind, inner = inner_pipeline(model)
        if self.kind == "log":
            assert isinstance(model, TransformedTargetRegressor)
            self.inverse = model.transformer_.inverse_transform if model.inverse_func is not np.exp else None
        steps = dict(inner.steps)
        features, self.estimator = steps.get("features"), steps.get("model")
        if not isinstance(features, Pipeline) or self.estimator is None:
            raise UnsupportedPipeline("expected Pipeline([features, model])")
        parts = dict(features.steps)
        self.perf, encode = parts.get("perf"), parts.get("encode")
        if not isinstance(self.perf, PerfFeatures) or encode is None or not hasattr(encode, "transformers_"):
            raise UnsupportedPipeline("expected features = Pipeline([perf: PerfFeatures, encode: ColumnTransformer])")
        if self.kind == "baseline" and self.perf.physics is None:
            raise UnsupportedPipeline("efficiency target without a physics estimate")
        self.baseline_model = model if self.kind == "baseline" else None
        # the learner of CNNs described by their numbers (PhysicsBaselineRegressor.by_numbers_learner), replayed too
        self.by_numbers_fast = (FastPipeline(model.by_numbers_view())
                                if getattr(self.baseline_model, "by_numbers_regressor_", None) is not None else None)
        names = [str(c) for c in self.perf.get_feature_names_out()]
        n_num = len(self.perf.numeric_names())
        self.scale = self.onehot = None
        self.num_idx = self.cat_cols = None
        for name, trans, cols in encode.transformers_:
            cols = list(cols)
            if trans == "drop" or not cols:
                continue
            if name == "num" and (trans == "passthrough" or isinstance(trans, StandardScaler | FunctionTransformer)):
                if isinstance(trans, FunctionTransformer) and (trans.func is not None or trans.validate):
                    raise UnsupportedPipeline("numeric FunctionTransformer that is not the identity")
                self.num_idx = np.array([names.index(c) for c in cols])
                if isinstance(trans, StandardScaler):
                    self.scale = (trans.mean_ if trans.with_mean else None, trans.scale_ if trans.with_std else None)
            elif name == "cat" and isinstance(trans, OneHotEncoder) and not trans.sparse_output:
                self.cat_cols, self.onehot = cols, self._onehot_tables(trans, cols)
            else:
                raise UnsupportedPipeline(f"ColumnTransformer part {name!r}: {type(trans).__name__}")
        if self.num_idx is None or max(self.num_idx, default=-1) >= n_num:
            raise UnsupportedPipeline("numeric part of the ColumnTransformer not found")
        self.cat_cols = self.cat_cols or []
        pandas_out = (getattr(encode, "_sklearn_output_config", None) or {}).get("transform") == "pandas"
        self.columns_out = list(encode.get_feature_names_out()) if pandas_out else None

    @staticmethod
    def _onehot_tables(enc, cols: list[str]) -> list[tuple[dict, np.ndarray, bool]]:
        """Per categorical column: (category -> table row, table of one-hot blocks, unknown allowed); the
        encoder's own tables where it has them (engineer.onehot_tables), else read from it now (older models)."""
        tables = getattr(enc, "tables_", None) or onehot_tables(enc)
        if len(tables) != len(cols):
            raise UnsupportedPipeline("one-hot tables do not match the encoder's columns")
        return [(index, table, enc.handle_unknown != "error") for index, table in tables]

    def _encode_categories(self, cats: dict[str, np.ndarray], n: int) -> list[np.ndarray]:
        blocks = []
        for col, (index, table, allow_unknown) in zip(self.cat_cols, self.onehot, strict=True):
            if not allow_unknown and not np.isin(np.asarray(cats[col], dtype=object), list(index)).all():
                raise UnsupportedPipeline(f"unknown category in {col!r} for handle_unknown='error'")
            blocks.append(onehot_block(index, table, cats[col]) if n else np.zeros((0, table.shape[1])))
        return blocks

    def predict(self, X: Mapping[str, Any]) -> np.ndarray:
        """Predictions for the raw input columns of the Pipeline (request + GPU specs), as pipeline.predict."""
        if getattr(self.baseline_model, "batch_monotone", False):
            return monotone_in_batch(self.predict_point, X)
        return self.predict_point(X)

    def predict_point(self, X: Mapping[str, Any]) -> np.ndarray:
        """Each row's answer on its own, as the model's `predict_point` (without its batch rule)."""
        sink: dict = {}
        num, cats = self.perf.transform_arrays(X, physics_sink=sink if self.kind == "baseline" else None)
        blocks = self._encode_categories(cats, len(num))
        # one output matrix written in place (no hstack copy: 7 ms a call on a fold's held-out rows)
        Z = np.empty((len(num), len(self.num_idx) + sum(b.shape[1] for b in blocks)))
        z = Z[:, :len(self.num_idx)]
        np.take(num, self.num_idx, axis=1, out=z)
        if self.scale is not None:
            mean, scale = self.scale
            if mean is not None:
                z -= mean
            if scale is not None:
                z /= scale
        at = len(self.num_idx)
        for block in blocks:
            Z[:, at:at + block.shape[1]] = block
            at += block.shape[1]
        if self.columns_out is not None:
            Z = pd.DataFrame(Z, columns=self.columns_out)
        raw = np.asarray(self.estimator.predict(Z))
        if self.kind == "baseline":
            correction = self.baseline_model.correction(X, raw) if hasattr(self.baseline_model, "correction") else raw
            out = np.exp(correction) * sink["physics"]["t_physics_ms"].to_numpy(dtype=float)
            if self.by_numbers_fast is not None:
                route = self.baseline_model.by_numbers_rows(sink["physics"])
                if route.any():
                    from .baseline import BY_NUMBERS

                    sub = {c: np.asarray(v)[route] for c, v in X.items()}
                    sub["model_key"] = np.full(int(route.sum()), BY_NUMBERS, dtype=object)
                    out[route] = self.by_numbers_fast.predict_point(sub)
            return out
        if self.kind == "log":
            if self.inverse is None:
                return np.exp(raw)
            out = self.inverse(raw.reshape(-1, 1) if raw.ndim == 1 else raw)
            return out.squeeze(axis=1) if out.ndim == 2 and out.shape[1] == 1 else out
        return raw


def compile_pipeline(pipeline) -> FastPipeline | None:
    """FastPipeline of a fitted model, or None where its shape is not one FastPipeline replays."""
    try:
        return FastPipeline(pipeline)
    except (UnsupportedPipeline, AttributeError, KeyError, ValueError) as err:
        log.info("serving through pipeline.predict (%s)", err)
        return None


def ptx_index_of(pipeline):
    """The PtxIndex a fitted model looks its PTX features up in, or None."""
    try:
        _, inner = inner_pipeline(pipeline)
        perf = dict(dict(inner.steps)["features"].steps)["perf"]
    except (UnsupportedPipeline, KeyError, AttributeError, TypeError):
        return None
    return perf._ptx_index() if hasattr(perf, "_ptx_index") else None
