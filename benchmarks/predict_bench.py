"""Prediction-time benchmark: per (CNN, GPU) pair in-process and through `mlflow models serve`.

Measures
- in-process: pyfunc.predict on one row per (CNN, GPU) pair (p50/p99 latency, rows/s) and on all pairs at once;
- server: single-row POST /invocations sequentially (p50/p99, requests/s) and with --concurrency threads;
- the training sweep's wall time, read from reports/train/<model>/metrics.json (and reports/train/sweep.json).
Prints a table, writes reports/bench/predict_bench.json and logs an MLflow run `benchmark/predict`.

Usage: python benchmarks/predict_bench.py [--model-uri models:/cnnperf-best@champion] [--pairs 300]
       [--requests 300] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def stats_ms(samples_s: list[float]) -> dict:
    a = np.asarray(samples_s) * 1e3
    return {"n": int(a.size), "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
            "mean_ms": float(a.mean()), "per_s": float(a.size / (a.sum() / 1e3))}


def pairs_frame(dataset: Path, columns: list[str], n: int, seed: int) -> pd.DataFrame:
    """n distinct (CNN, GPU) request rows sampled from the training table (realistic inputs)."""
    df = pd.read_parquet(dataset)
    df = df.drop_duplicates(["model_key", "gpu"]).sample(frac=1.0, random_state=seed).head(n)
    return df[[c for c in columns if c in df.columns]].reset_index(drop=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(uri: str, tracking_uri: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local",
                             "-h", "127.0.0.1", "-p", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            if requests.get(f"{url}/ping", timeout=1).status_code == 200:
                return proc, url
        except requests.ConnectionError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError("server did not answer /ping within 120 s")


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def sweep_wall(reports: Path) -> dict:
    per_model = {}
    for m in ("lr", "knn", "rf", "dt", "xgb"):
        p = reports / m / "metrics.json"
        if p.exists():
            per_model[m] = json.loads(p.read_text())["wall_seconds"]
    out = {"per_model_seconds": per_model, "sum_seconds": float(sum(per_model.values()))}
    sw = reports / "sweep.json"
    if sw.exists():
        out["src_sweep_wall_seconds"] = json.loads(sw.read_text())["wall_seconds"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-uri", default="models:/cnnperf-best@champion")
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import mlflow
    from omegaconf import OmegaConf
    from tqdm import tqdm

    from src.config import compose

    c = OmegaConf.to_container(compose([]), resolve=True)
    tracking = c["mlflow"]["tracking_uri"]
    mlflow.set_tracking_uri(tracking)
    model = mlflow.pyfunc.load_model(args.model_uri)
    meta_cols = [s.name for s in model.metadata.get_input_schema().inputs]
    req = pairs_frame(ROOT / c["data"]["dataset"], meta_cols, args.pairs, args.seed)
    model.predict(req.head(2))  # warm-up

    single = []
    for i in tqdm(range(len(req)), desc="in-process, one pair per call"):
        t = time.perf_counter()
        model.predict(req.iloc[[i]])
        single.append(time.perf_counter() - t)
    t = time.perf_counter()
    model.predict(req)
    batch_s = time.perf_counter() - t

    proc, url = start_server(args.model_uri, tracking)
    try:
        records = json.loads(req.to_json(orient="records"))
        sess = requests.Session()

        def post(i: int) -> float:
            t0 = time.perf_counter()
            r = sess.post(f"{url}/invocations", json={"dataframe_records": [records[i % len(records)]]}, timeout=30)
            r.raise_for_status()
            return time.perf_counter() - t0

        post(0)
        seq = [post(i) for i in tqdm(range(args.requests), desc="server, sequential")]
        t = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as ex:
            conc = list(ex.map(post, range(args.requests)))
        conc_wall = time.perf_counter() - t
    finally:
        stop_server(proc)

    out = {
        "model_uri": args.model_uri,
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_at_end": os.getloadavg()[0]},
        "in_process_single_pair": stats_ms(single),
        "in_process_batch": {"rows": len(req), "seconds": batch_s, "rows_per_s": len(req) / batch_s,
                             "us_per_row": batch_s / len(req) * 1e6},
        "server_sequential": stats_ms(seq),
        "server_concurrent": {**stats_ms(conc), "threads": args.concurrency,
                              "requests_per_s": args.requests / conc_wall},
        "training_sweep": sweep_wall(ROOT / c["reports_dir"]),
    }
    dest = ROOT / "reports" / "bench"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "predict_bench.json").write_text(json.dumps(out, indent=2) + "\n")
    mlflow.set_experiment(c["mlflow"]["experiment"])
    with mlflow.start_run(run_name="benchmark/predict"):
        mlflow.set_tags({"run_kind": "benchmark", "model_uri": args.model_uri})
        flat = {f"{k}/{kk}": vv for k, v in out.items() if isinstance(v, dict) for kk, vv in v.items()
                if isinstance(vv, int | float)}
        mlflow.log_metrics(flat)
        mlflow.log_artifact(str(dest / "predict_bench.json"))
    print(f"{'measurement':38s} {'p50 ms':>9s} {'p99 ms':>9s} {'per s':>9s}")
    for k in ("in_process_single_pair", "server_sequential", "server_concurrent"):
        s = out[k]
        print(f"{k:38s} {s['p50_ms']:9.2f} {s['p99_ms']:9.2f} {s.get('requests_per_s', s['per_s']):9.1f}")
    b = out["in_process_batch"]
    print(f"in-process batch of {b['rows']} pairs: {b['seconds'] * 1e3:.1f} ms ({b['us_per_row']:.1f} us/row)")
    print(f"training sweep wall (sum of per-model runs): {out['training_sweep']['sum_seconds']:.0f} s")


if __name__ == "__main__":
    main()
