"""TCP_NODELAY on every accepted connection of the server process that loads the served model.

Why: `mlflow models serve --workers N` (N > 1) runs uvicorn's multiprocess supervisor, which binds the listening
socket itself with `proto` 0. Accepted sockets inherit that `proto`, and asyncio sets TCP_NODELAY only on sockets
reporting `proto == IPPROTO_TCP` (`asyncio.base_events._set_nodelay`). Nagle's algorithm then holds each
response's body until the client acknowledges its headers, which a Linux client delays by ~40 ms: every
keep-alive request past the first took 52 ms instead of 8 (measured, `benchmarks/predict_bench.py`; uvicorn
issue Kludex/uvicorn#3149, open in uvicorn 0.54). With one worker uvicorn lets asyncio bind from getaddrinfo
(`proto` 6) and the option is set. `enable()` makes asyncio set it on every TCP stream socket whatever its
`proto`, as it does for the single-worker path; it is idempotent and touches nothing else.
"""

from __future__ import annotations

import socket

_TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def _set_nodelay(sock: socket.socket) -> None:
    if sock.family in _TCP_FAMILIES and sock.type == socket.SOCK_STREAM:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # as asyncio's own: a socket that refuses the option is served as it is


_set_nodelay.cnnperf = True  # type: ignore[attr-defined]


def enable() -> bool:
    """Install `_set_nodelay` as asyncio's; returns whether it was installed now (False: already there)."""
    from asyncio import base_events

    if getattr(base_events._set_nodelay, "cnnperf", False):
        return False
    base_events._set_nodelay = _set_nodelay
    return True
