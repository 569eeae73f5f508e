"""A cuttable path to the API server for the kubelet harness (devstack/kubelet.py): each pod's
`groupops consume` reaches the API server through its own TCP relay, so that a test can cut one
replica off the control plane (it can no longer renew its Lease) while Kafka stays reachable.

`proxied_kubeconfig` writes the replica's kubeconfig pointing at its relay; the TLS name stays
127.0.0.1, which the local API server's certificate carries.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import yaml

__all__ = ["CuttableProxy", "api_server_address", "proxied_kubeconfig"]


class CuttableProxy:
    """A TCP relay on 127.0.0.1 in front of the API server. `cut()` drops every connection and
    black-holes new ones (accepted, never answered: clients hang until their own timeouts, as
    behind a dead network path); `restore()` relays again."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            doomed = list(self._sockets)
            self._sockets.clear()
        for sock in doomed:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False
            doomed = list(self._sockets)  # black-holed while cut: let their clients retry
            self._sockets.clear()
        for sock in doomed:
            _close(sock)

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.add(client)
                cut = self._cut
            if cut:
                continue  # black hole: hold the connection, say nothing
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)  # a watch is silent for long stretches
            with self._lock:
                self._sockets.add(upstream)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data or self._cut:
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with self._lock:
                    self._sockets.discard(sock)
                _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def proxied_kubeconfig(kubeconfig: str, proxy: CuttableProxy, path: Path) -> str:
    """A copy of `kubeconfig` whose server is the proxy (same TLS name: 127.0.0.1)."""
    document = yaml.safe_load(Path(kubeconfig).read_text())
    for cluster in document["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return str(path)


def api_server_address(kubeconfig: str) -> tuple[str, int]:
    document = yaml.safe_load(Path(kubeconfig).read_text())
    server = document["clusters"][0]["cluster"]["server"]
    host_port = server.split("://", 1)[1].split("/", 1)[0]
    host, _, port = host_port.rpartition(":")
    return host, int(port)
