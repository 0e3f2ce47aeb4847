"""The train stage's held-out predictions, read the one way every benchmark that looks at them needs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def held_out_predictions(protocols: Iterable[str], models: Iterable[str],
                         root: Path = ROOT) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """(protocol, model, reports/train/<model>/<protocol>/predictions.csv) for every pair the pipeline wrote."""
    models = list(models)
    for protocol in protocols:
        for model in models:
            path = root / "reports" / "train" / model / protocol / "predictions.csv"
            if path.exists():
                yield protocol, model, pd.read_csv(path)
