"""Coverage of the served intervals under the grouped protocols, with and without the escalations and balancing.

For the registered champion's Pipeline (its hyper-parameters, refitted in every fold): each GPU group, each
leave_arch_out fold and each runtime but eager is held out in turn; every served kind is calibrated on the rest
(cross-conformal, K as the pipeline's calibrate stage); the held-out rows' intervals are scored under the served
rule with and without the escalations, and with the fold-balanced kinds (arch, runtime) pooled by rows as before
2026-11-30 (src/predict/served_coverage.py): same rows, predictions and out-of-fold scores; coverage pooled over
rows and read per held-out GPU / runtime / setup (each counts once).
Writes reports/bench/served_interval_bench.json (and a PNG) and logs an MLflow run `benchmark/served_intervals`
(experiment cnnperf-bench).

    python benchmarks/served_interval_bench.py [--model-uri models:/cnnperf-best@champion] [--k 2] [--jobs 2]
        [--protocols gpu arch runtime setup] [--no-mlflow]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.config import REPO_ROOT, compose  # noqa: E402
from src.tracking import record_benchmark  # noqa: E402

LEVELS = (0.8, 0.9)


def rules() -> dict:
    """The rules scored: the escalations each applies (src/features/intervals.py ESCALATIONS) and its balanced kinds
    (() = every kind pooled by rows, the served rule until 2026-11-30)."""
    from src.predict.served_coverage import Rule

    return {"novelty": Rule((), ()), "no_setup": Rule(("arch", "runtime"), ()),
            "by_rows": Rule(("arch", "runtime", "setup"), ()), "served": Rule(("arch", "runtime", "setup"))}


COLORS = {"novelty": "tab:gray", "no_setup": "tab:orange", "by_rows": "tab:green", "served": "tab:blue"}


def plot(results: dict, path: Path) -> Path:
    """Coverage per protocol and level, one bar per rule, nominal levels dashed."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    labels, x, width = [], 0, 0.8 / len(COLORS)
    for protocol, res in results.items():
        if not res["pooled"]:  # no outer fold (e.g. a dataset with one runtime)
            continue
        for lv in LEVELS:
            key = f"{lv:.2f}"
            for j, rule in enumerate(COLORS):
                ax.bar(x + width * j, res["pooled"][rule][key]["coverage"], width=width * 0.95,
                       color=COLORS[rule], label=rule if x == 0 else None)
            ax.hlines(lv, x - width / 2, x + 0.8 - width / 2, colors="k", linestyles="dashed")
            labels.append((x + 0.4 - width / 2, f"{protocol}\n{key}"))
            x += 1
    ax.set_xticks([p for p, _ in labels], [t for _, t in labels], fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("coverage of held-out rows")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-uri", default="models:/cnnperf-best@champion")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--protocols", nargs="+", default=["gpu", "arch", "runtime", "setup"])
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports" / "bench" / "served_interval_bench.json"))
    args = ap.parse_args()

    import mlflow
    from sklearn.base import clone

    from src.predict.data import load_split
    from src.predict.model import load
    from src.predict.served_coverage import served_rule_coverage

    c = OmegaConf.to_container(compose([]), resolve=True)
    mlflow.set_tracking_uri(c["mlflow"]["tracking_uri"])
    mlflow.set_registry_uri(c["mlflow"]["tracking_uri"])
    model = load(args.model_uri)
    data = load_split(model.meta.get("features", "engineered"), list(model.meta.get("excluded_families", [])),
                      None, model.meta.get("max_rows"))
    template = clone(model.pipeline)
    results, t0 = {}, time.perf_counter()
    for protocol in args.protocols:
        t = time.perf_counter()
        results[protocol] = served_rule_coverage(template, data, protocol, list(model.meta["gpu_features"]), LEVELS,
                                                 k=args.k, seed=int(data.config["seed"]), jobs=args.jobs,
                                                 rules=rules())
        results[protocol]["seconds"] = time.perf_counter() - t
        pooled = results[protocol]["pooled"]
        print(f"leave-{protocol}-out ({results[protocol]['n_folds']} folds): " + "; ".join(
            f"{rule} " + ", ".join(f"{lv} {v['coverage']:.3f} (x{v['median_width_factor']:.2f})"
                                   for lv, v in pooled[rule].items()) for rule in pooled))
        for rule, levels in pooled.items():
            print(f"  {rule} per held-out group: " + "; ".join(
                f"{lv} mean {g['mean']:.3f}, median {g['median']:.3f}, min {g['min']:.3f} ({g['worst']}), "
                f"{[v for k, v in g.items() if k.startswith('below_')][0]} of {g['groups']} below {float(lv) - 0.1:.2f}"
                for lv, v in levels.items() for g in [next(x for k, x in v.items() if k.startswith('per_'))]))
        print(f"  rows per kind: {results[protocol]['kinds_used']}")
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    png = plot(results, out_path.with_suffix(".png"))
    metrics = {f"{p}_{rule}_coverage_{lv}": float(v["coverage"])
               for p, r in results.items() for rule, levels in r["pooled"].items() for lv, v in levels.items()}
    metrics.update({f"{p}_{rule}_width_{lv}": float(v["median_width_factor"])
                    for p, r in results.items() for rule, levels in r["pooled"].items() for lv, v in levels.items()})
    metrics.update({f"{p}_{rule}_group_mean_{lv}": float(next(x for k, x in v.items() if k.startswith("per_"))["mean"])
                    for p, r in results.items() for rule, levels in r["pooled"].items() for lv, v in levels.items()})
    record_benchmark({"model_uri": args.model_uri, "k": args.k, "rows": int(len(data.df)),
                      "seconds": float(np.round(time.perf_counter() - t0, 1)), "protocols": results},
                     out_path, None if args.no_mlflow else c["mlflow"], "benchmark/served_intervals",
                     {"model_uri": args.model_uri}, metrics, artifacts=[png])
    print(f"-> {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
