"""Real registries for tests (Debian's docker-registry on free 127.0.0.1 ports, plain HTTP or
TLS with htpasswd auth) and a fault-injecting TCP proxy to put between a pusher and one."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Registry:
    address: str
    root: Path
    scheme: str = "http"
    ca: Path | None = None

    def get(
        self, path: str, accept: str = "", auth: str | None = None
    ) -> tuple[bytes, dict[str, str]]:
        import ssl

        request = urllib.request.Request(f"{self.scheme}://{self.address}/v2/{path}")
        if accept:
            request.add_header("Accept", accept)
        if auth:
            request.add_header("Authorization", f"Basic {auth}")
        context = ssl.create_default_context(cafile=str(self.ca)) if self.ca else None
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        with opener.open(request, timeout=30) as response:
            return response.read(), dict(response.headers.items())


INDEX_ACCEPT = (
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.oci.image.index.v1+json"
)


def platforms(index: bytes) -> list[str]:
    found = []
    for child in json.loads(index)["manifests"]:
        p = child["platform"]
        found.append("/".join(x for x in (p["os"], p["architecture"], p.get("variant")) if x))
    return found


@contextmanager
def registry(
    root: Path, *, htpasswd: Path | None = None, tls: tuple[Path, Path] | None = None
) -> Iterator[Registry]:
    """docker-registry serving ``root`` on a free loopback port, stopped afterwards."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    (root / "data").mkdir(parents=True, exist_ok=True)
    lines = ["version: 0.1", "log:", "  level: info", "storage:", "  filesystem:",
             f"    rootdirectory: {root / 'data'}", "  delete:", "    enabled: true",
             "http:", f"  addr: {address}"]  # fmt: skip
    if tls:
        lines += ["  tls:", f"    certificate: {tls[0]}", f"    key: {tls[1]}"]
    if htpasswd:
        lines += ["auth:", "  htpasswd:", "    realm: dockerarch-test", f"    path: {htpasswd}"]
    (root / "config.yml").write_text("\n".join(lines) + "\n")
    log = (root / "registry.log").open("w")
    proc = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    reg = Registry(address=address, root=root, scheme="https" if tls else "http",
                   ca=tls[0] if tls else None)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                reg.get("")
                break
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    break
            except OSError:
                pass
            assert proc.poll() is None, (root / "registry.log").read_text()
            assert time.monotonic() < deadline, "the test registry did not answer"
            time.sleep(0.2)
        yield reg
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


class FaultProxy:
    """A TCP proxy on 127.0.0.1 that drops connections on purpose.

    ``drop_first``: the first N connections that carry more than ``after_bytes`` from the client
    (a blob upload, say) are cut there. ``drop_matching``: every connection whose client bytes
    contain that pattern is cut before they are forwarded. ``drop_all``: every connection is
    closed as soon as it is accepted."""

    def __init__(self, upstream: str, *, drop_first: int = 0, after_bytes: int = 256 * 1024,
                 drop_matching: bytes | None = None, drop_all: bool = False) -> None:  # fmt: skip
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.drop_first, self.after_bytes = drop_first, after_bytes
        self.drop_matching, self.drop_all = drop_matching, drop_all
        self.dropped = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self.connections += 1
            if self.drop_all:
                with self._lock:
                    self.dropped += 1
                client.close()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _cut(self, *socks: socket.socket) -> None:
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=30)
        except OSError:
            client.close()
            return
        back = threading.Thread(target=self._pipe, args=(upstream, client), daemon=True)
        back.start()
        sent = 0
        doomed = False
        try:
            while chunk := client.recv(65536):
                if self.drop_matching is not None and self.drop_matching in chunk:
                    doomed = True
                elif not doomed and sent + len(chunk) > self.after_bytes:
                    with self._lock:
                        if self.dropped < self.drop_first:
                            self.dropped += 1
                            doomed = True
                if doomed:
                    if self.drop_matching is not None:
                        with self._lock:
                            self.dropped += 1
                    self._cut(client, upstream)
                    return
                upstream.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        finally:
            self._cut(client, upstream)

    @staticmethod
    def _pipe(source: socket.socket, dest: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                dest.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                dest.shutdown(socket.SHUT_WR)
            except OSError:
                pass
