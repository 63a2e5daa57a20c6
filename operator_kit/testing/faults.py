"""Fault injection for tests: a TCP proxy that can stall or cut an operator's connections.

Put `TcpProxy` between an operator and the API server (`proxied_client`) and the test
controls the network: `pause()` keeps every socket open but stops passing bytes (a
half-open connection, a hung load balancer — what a watch must detect by itself),
`resume()` lets them flow again, and `cut()` closes every connection at once (a
restart, a dropped route). Loopback only.
"""

from __future__ import annotations

import copy
import select
import socket
import threading
from types import TracebackType

from kubernetes import client


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target, under the test's control."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, name=f"proxy-{self.port}",
                                          daemon=True)
        self._accepter.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``: where clients connect instead of the real server."""
        return f"127.0.0.1:{self.port}"

    def pause(self) -> None:
        """Stop passing bytes; connections stay open (a stall)."""
        self._flowing.clear()

    def resume(self) -> None:
        """Pass bytes again after `pause`."""
        self._flowing.set()

    def cut(self) -> None:
        """Close every open connection; new ones are still accepted."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _close(sock)

    def connections(self) -> int:
        """How many client connections are open now."""
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        """Stop accepting, close every connection and join the proxy's threads."""
        self._closed.set()
        self._flowing.set()
        _close(self._listener)
        self.cut()
        self._accepter.join(5)
        for thread in list(self._threads):
            thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(downstream)
                continue
            with self._lock:
                self._pairs.append((downstream, upstream))
            thread = threading.Thread(target=self._pump, args=(downstream, upstream),
                                      name=f"proxy-{self.port}-pump", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._closed.is_set():
                if not self._flowing.wait(0.2):
                    continue
                readable, _, _ = select.select([a, b], [], [], 0.2)
                if not self._flowing.is_set():
                    continue
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            _close(a)
            _close(b)


def proxied_client(source: client.ApiClient, proxy: TcpProxy) -> client.ApiClient:
    """A copy of `source` that reaches its API server through `proxy`."""
    configuration = copy.copy(source.configuration)
    configuration.host = f"https://{proxy.address}"
    return client.ApiClient(configuration)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
