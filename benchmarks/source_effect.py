"""Before/after the new sources on the same rows: each model's pooled MAPE per protocol on all held-out rows, on
the rows of the four original sources only, and on the new sources' rows (from the train stage's predictions).

Why: adding sources changes the table, so a headline figure moves for two reasons (new, harder rows; a model
that learnt from more GPUs). Restricting the new run's held-out predictions to the original sources' rows gives a
comparison with the previous pipeline on the same rows where the protocol scores every row (grouped protocols);
for random/random_rows the held-out subset differs and the figure is indicative only.

Usage: python benchmarks/source_effect.py [--before reports/bench/metrics_before.json] (after `dvc repro`);
writes reports/bench/source_effect.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from pipeline_predictions import held_out_predictions

ROOT = Path(__file__).resolve().parents[1]
ORIGINAL = ("timm", "ryujaehun", "dlinfbench", "lambda")
MODELS = ("lr", "knn", "rf", "dt", "xgb")
PROTOCOLS = ("random", "random_rows", "leave_model_out", "leave_gpu_out", "leave_family_out")


def mape(frame: pd.DataFrame) -> float:
    return float(np.mean(np.abs(frame["predicted"] - frame["measured"]) / frame["measured"]) * 100) if len(
        frame) else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="reports/metrics.json of the previous pipeline run")
    args = parser.parse_args()
    before = json.loads(args.before.read_text()) if args.before else {}
    out: dict = {}
    for protocol, model, pred in held_out_predictions(PROTOCOLS, MODELS):
        source = pred["measurement_id"].str.split(":", n=1).str[0]
        old = pred[source.isin(ORIGINAL)]
        out.setdefault(protocol, {})[model] = {
            "rows_all": int(len(pred)), "mape_all": mape(pred),
            "rows_original_sources": int(len(old)), "mape_original_sources": mape(old),
            "rows_new_sources": int(len(pred) - len(old)), "mape_new_sources": mape(pred[~source.isin(ORIGINAL)]),
            "mape_before": (before.get(protocol, {}).get(model, {}) or {}).get("mape"),
            "rows_before": (before.get(protocol, {}).get(model, {}) or {}).get("test_rows"),
        }
        r = out[protocol][model]
        print(f"{protocol:17s} {model:4s} all {r['mape_all']:6.2f} % ({r['rows_all']})  original sources "
              f"{r['mape_original_sources']:6.2f} % ({r['rows_original_sources']})  new sources "
              f"{r['mape_new_sources']:6.2f} % ({r['rows_new_sources']})  before {r['mape_before']}")
    target = ROOT / "reports" / "bench" / "source_effect.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
