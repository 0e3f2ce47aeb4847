"""The served model's process sets TCP_NODELAY on accepted sockets whose `proto` is 0 (uvicorn --workers N)."""

import asyncio
import socket
from asyncio import base_events

import pytest

from src.features import tcp_nodelay


def _accepted_nodelay(listener: socket.socket) -> int:
    """Serve one connection on `listener` with asyncio; return TCP_NODELAY of the accepted socket."""
    seen = {}

    class Probe(asyncio.Protocol):
        def connection_made(self, transport):
            sock = transport.get_extra_info("socket")
            seen["nodelay"] = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            seen["proto"] = sock.proto
            transport.close()

    async def main():
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen["proto"] == 0  # the case uvicorn's supervisor creates
    return seen["nodelay"]


def _prebound() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto left 0, as uvicorn's Config.bind_socket
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_enable_sets_nodelay_on_sockets_accepted_from_a_prebound_listener(monkeypatch):
    monkeypatch.setattr(base_events, "_set_nodelay", base_events._set_nodelay)  # restored after the test
    stock = base_events._set_nodelay
    if not getattr(stock, "cnnperf", False):
        assert _accepted_nodelay(_prebound()) == 0  # asyncio alone leaves Nagle on: the bug the module fixes
    tcp_nodelay.enable()
    assert _accepted_nodelay(_prebound()) != 0
    assert tcp_nodelay.enable() is False  # idempotent


class _RecordingSocket:
    """A socket's family and type, recording every option set on it."""

    def __init__(self, family: int, kind: int) -> None:
        self.family, self.type, self.options = family, kind, []

    def setsockopt(self, *args) -> None:
        self.options.append(args)


@pytest.mark.parametrize(("family", "kind"), [(socket.AF_UNIX, socket.SOCK_STREAM),
                                              (socket.AF_INET, socket.SOCK_DGRAM)])
def test_non_tcp_sockets_are_left_alone(family, kind):
    sock = _RecordingSocket(family, kind)
    tcp_nodelay._set_nodelay(sock)
    assert sock.options == []
    tcp = _RecordingSocket(socket.AF_INET6, socket.SOCK_STREAM)  # and the stand-in does record a TCP stream's
    tcp_nodelay._set_nodelay(tcp)
    assert tcp.options == [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]

