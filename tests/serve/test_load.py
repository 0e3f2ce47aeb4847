"""Load and fault test of the real server on 127.0.0.1 (issue 13): concurrent clients send a fixed mix of valid and
malformed requests; every answer's status and message is checked, and valid answers do not change under load.

Deterministic: the list of requests and what each must get back is fixed; only their interleaving varies, and no
assertion depends on it. Bounded: 8 clients x 40 requests plus two 10,000-row bodies (~20 s on 2 busy cores).
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import requests

from tests.train.tiny import measurements

VALID = {"gpu": "GeForce RTX 4090", "model_key": "resnet50", "param_count_m": 25.56, "gmacs": 4.11,
         "activations_m": 11.11, "batch_size": 32, "img_size": 224, "precision": "amp_fp16", "mode": "inference"}
CLIENTS, PER_CLIENT = 8, 40


def body(records) -> bytes:
    return json.dumps({"dataframe_records": records}).encode()


def big_body(rows: int = 10_000) -> bytes:
    """10,000 real-looking rows (the tiny table's CNNs, GPUs and configurations), sampled with a fixed seed."""
    m = measurements()
    m = m.loc[~m["is_cpu"] & m["gmacs"].notna()]
    cols = ["gpu", "model_key", "param_count_m", "gmacs", "activations_m", "batch_size", "img_size", "precision",
            "mode"]
    sample = m[cols].sample(n=rows, replace=True, random_state=0)
    return body(json.loads(sample.to_json(orient="records")))


# name -> (request body, HTTP status, what the JSON message starts with, or the number of predictions for a 200)
CASES: dict[str, tuple[bytes, int, str | int]] = {
    "valid": (body([VALID]), 200, 1),
    "valid_three_gpus": (body([VALID, {**VALID, "gpu": "H100 SXM5 80 GB"}, {**VALID, "gpu": "Tesla T4",
                                                                           "mode": "training"}]), 200, 3),
    "valid_out_of_memory": (body([{**VALID, "param_count_m": 138.36, "gmacs": 15.47, "activations_m": 13.56,
                                   "batch_size": 4096, "precision": "fp32", "mode": "training"}]), 200, 1),
    "broken_json": (b'{"dataframe_records": [{"gpu": "GeForce RTX 4090", "gmacs": ', 400, ""),
    "wrong_type": (body([{**VALID, "gmacs": "many"}]), 400, "field 'gmacs' row 0: 'many' is not a number"),
    "nan": (body([{**VALID, "activations_m": float("nan")}]), 400, "field 'activations_m' row 0: value is NaN"),
    "negative": (body([{**VALID, "batch_size": -8}]), 400,
                 "field 'batch_size' row 0: -8 is outside the valid range [1, 65536]"),
    "huge": (body([{**VALID, "batch_size": 1_000_000_000_000}]), 400,
             "field 'batch_size' row 0: 1e+12 is outside the valid range [1, 65536]"),
    "unknown_gpu": (body([{**VALID, "gpu": "GeForce RTX 9999"}]), 400, "field 'gpu' row 0: unknown GPU"),
    "unknown_field": (body([{**VALID, "batchsize": 32}]), 400, "unknown field(s) ['batchsize']"),
    "empty": (body([]), 400, "empty request"),
}


def send(url: str, payload: bytes, session: requests.Session) -> tuple[int, dict]:
    r = session.post(f"{url}/invocations", data=payload, headers={"Content-Type": "application/json"}, timeout=120)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, {"message": r.text}


def check(name: str, status: int, answer: dict, baseline: dict) -> str | None:
    """None if the answer is what `name` must get, else what is wrong."""
    _, want_status, want = CASES[name] if name in CASES else (None, 200, 10_000)
    if status != want_status:
        return f"{name}: HTTP {status} (want {want_status}): {str(answer)[:300]}"
    if status == 400:
        message = answer.get("message", "")
        return None if message.startswith(want) else f"{name}: message {message[:200]!r} (want {want!r}...)"
    preds = answer.get("predictions", [])
    if len(preds) != want:
        return f"{name}: {len(preds)} predictions (want {want})"
    if name in baseline and preds != baseline[name]:
        return f"{name}: answer changed under load"
    return None


def test_concurrent_valid_and_malformed_requests(server):
    big = big_body()
    sess = requests.Session()
    baseline = {}
    for name, (payload, status, _) in CASES.items():
        if status == 200:
            code, answer = send(server, payload, sess)
            assert code == 200, answer
            baseline[name] = answer["predictions"]
    oom = baseline["valid_out_of_memory"][0]
    assert oom["fits_in_memory"] is False and oom["memory_needed_gb"] > oom["gpu_memory_gb"] > 0

    names = list(CASES)
    plan = [names[i % len(names)] for i in range(CLIENTS * PER_CLIENT)]
    plan[5] = plan[len(plan) // 2] = "big_10000"
    payloads = {**{n: c[0] for n, c in CASES.items()}, "big_10000": big}
    problems: list[str] = []
    statuses: list[int] = []
    lock = threading.Lock()
    todo = iter(range(len(plan)))

    def client() -> None:
        s = requests.Session()
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            code, answer = send(server, payloads[plan[i]], s)
            issue = check(plan[i], code, answer, baseline)
            with lock:
                statuses.append(code)
                if issue:
                    problems.append(issue)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    wall = time.perf_counter() - t0
    assert not any(t.is_alive() for t in threads), "clients still waiting after 180 s"
    assert not problems, problems[:10]
    assert len(statuses) == len(plan) and set(statuses) == {200, 400}
    print(f"\n{len(plan)} requests from {CLIENTS} clients in {wall:.1f} s ({len(plan) / wall:.0f}/s)")

    for name, preds in baseline.items():  # afterwards: the same answers
        code, answer = send(server, payloads[name], sess)
        assert code == 200 and answer["predictions"] == preds, name
    assert np.isfinite([p["latency_ms"] for p in baseline["valid_three_gpus"]]).all()


@pytest.mark.parametrize("payload,status", [
    (b"not json at all", 400),
    (b'{"dataframe_records": [{"gpu": 1}], "extra": {"a": 1}}', 400),
    (b"{}", 400),
])
def test_malformed_envelopes_are_400_and_server_keeps_serving(server, payload, status):
    code, _ = send(server, payload, requests.Session())
    assert code == status
    code, answer = send(server, CASES["valid"][0], requests.Session())
    assert code == 200 and len(answer["predictions"]) == 1
