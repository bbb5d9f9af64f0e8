"""A TCP forwarder from a network namespace's address to a port of this
machine's loopback: the test session's Redis and an API it started become
reachable from the namespaced "hosts" of :mod:`tests.support.netns` at the
service namespace's address, as a service host would be, without starting
another Redis or PostgreSQL there.

Only the listening socket is made inside the namespace (a socket stays in the
namespace it was created in); the threads that accept and copy bytes, and the
connections to loopback, live in this process's own namespace.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

from tests.support.netns import run_in


class Forwarder:
    """Listen on ``address`` (a free port) inside ``ns``; each connection goes to
    ``127.0.0.1:target_port``. ``port`` is where it listens. Close it (or use it
    as a context manager) to stop listening and cut every connection."""

    def __init__(self, ns: str, address: str, target_port: int) -> None:
        self.target_port = target_port
        self.listener = run_in(ns, lambda: socket.create_server((address, 0)))
        self.port: int = self.listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"forward-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                outside = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
                outside.settimeout(None)
            except OSError:
                inside.close()
                continue
            with self._lock:
                if self._closed:
                    inside.close()
                    outside.close()
                    return
                self._open += [inside, outside]
            for src, dst in ((inside, outside), (outside, inside)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._open = self._open, []
        self.listener.close()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # either side closed
