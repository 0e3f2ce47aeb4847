"""Which held-out errors the data could support: rows whose measurement setting training saw, and the rest.

A grouped protocol holds out a GPU, a family or an architecture; when the held-out group also owns the only rows
of a measurement setting (source, framework release, precision, mode, layout, runtime: `SETTING_COLUMNS` of
src.train.protocols), the model must transfer across the GPU and the setup at once. The train stage labels each
held-out row (`setting_support` in predictions.csv: `seen`, `other_release`, `unseen`); this module splits the
error by that label, per protocol, model and group, so a target can be judged on what the data supports and the
rest named as a data limit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SUPPORT_COLUMNS = ["protocol", "estimator", "group", "setting", "rows", "mape"]


def by_group(pred: pd.DataFrame, group: str) -> pd.DataFrame:
    """Per group and support level: rows and MAPE % of the held-out predictions in `pred` (columns `group`,
    measured, predicted, setting_support). A level with no rows in a group is left out, not scored as 0."""
    missing = [c for c in (group, "measured", "predicted", "setting_support") if c not in pred.columns]
    if missing:
        raise KeyError(f"predictions lack column(s) {missing}: the reports are stale, run `dvc repro`")
    measured = pred["measured"].to_numpy(float)
    ape = np.abs(pred["predicted"].to_numpy(float) - measured) / measured * 100.0
    d = pd.DataFrame({"group": pred[group].astype(str).to_numpy(), "setting": pred["setting_support"].astype(str),
                      "ape": ape})
    return (d.groupby(["group", "setting"], sort=True).agg(rows=("ape", "size"), mape=("ape", "mean"))
            .reset_index())
