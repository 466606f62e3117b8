"""fetch-sdist, the native sdist download of hybrid builds, against a simple index served from
this process (PEP 691 JSON and PEP 503 HTML pages)."""

from __future__ import annotations

import hashlib
import http.server
import importlib.machinery
import importlib.util
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from dockerarch import accel

SDIST = b"not really a tarball, but bytes with a known sha256"


def _load():
    loader = importlib.machinery.SourceFileLoader("fetch_sdist", str(accel.DATA / "fetch-sdist"))
    spec = importlib.util.spec_from_loader("fetch_sdist", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


fetch_sdist = _load()


def _file(name: str, *, yanked: bool = False, sha: str | None = None) -> dict[str, object]:
    return {"filename": name, "url": f"../../files/{name}",
            "hashes": {"sha256": sha or hashlib.sha256(SDIST).hexdigest()}, "yanked": yanked}  # fmt: skip


FILES = [
    _file("demo-pkg-1.0.tar.gz"),
    _file("demo_pkg-1.1.zip"),
    _file("demo_pkg-1.1.tar.gz"),
    _file("demo_pkg-1.2.tar.gz", yanked=True),
    _file("demo_pkg-2.0rc1.tar.gz"),
    _file("demo_pkg-1.1-cp311-cp311-linux_aarch64.whl"),
    _file("demo_pkg-1.3.tar.gz", sha="0" * 64),
]


@pytest.fixture
def index() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            if self.path.startswith("/files/"):
                body, kind = SDIST, "application/octet-stream"
            elif self.path == "/json/demo-pkg/":
                body, kind = (
                    json.dumps({"files": FILES}).encode(),
                    "application/vnd.pypi.simple.v1+json",
                )
            elif self.path == "/html/demo-pkg/":
                links = "".join(
                    f'<a href="{f["url"]}#sha256={f["hashes"]["sha256"]}"{" data-yanked" if f["yanked"] else ""}>'
                    f"{f['filename']}</a>"
                    for f in FILES
                )
                body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ("demo-pkg", "demo_pkg-1.3.tar.gz"),  # newest final release, whatever its name spelling
        ("Demo.Pkg>=1.0,<1.3", "demo_pkg-1.1.tar.gz"),  # .tar.gz before .zip; 1.2 is yanked
        ("demo_pkg==1.2", "demo_pkg-1.2.tar.gz"),  # pinned: yanked files still count
        ("demo-pkg==1.0", "demo-pkg-1.0.tar.gz"),
        ("demo-pkg>=2.0rc1", "demo_pkg-2.0rc1.tar.gz"),  # pre-releases when asked for
        ("demo-pkg>=3", None),
        ("other-pkg", None),
    ],
)
def test_select(requirement: str, expected: str | None) -> None:
    chosen = fetch_sdist.select(FILES, Requirement(requirement))
    assert (chosen["filename"] if chosen else None) == expected


@pytest.mark.parametrize("kind", ["json", "html"])
def test_fetch_downloads_the_checked_file(index: str, tmp_path: Path, kind: str) -> None:
    path = fetch_sdist.fetch(Requirement("demo-pkg==1.1"), tmp_path / "out", f"{index}/{kind}/")
    assert path == tmp_path / "out" / "demo_pkg-1.1.tar.gz"
    assert path.read_bytes() == SDIST
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_fetch_rejects_a_wrong_hash_and_leaves_nothing(index: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"demo_pkg-1\.3\.tar\.gz: sha256 .*, the index says 0000"):
        fetch_sdist.fetch(Requirement("demo-pkg==1.3"), tmp_path, f"{index}/json/")
    assert list(tmp_path.iterdir()) == []


def test_fetch_says_what_matched_nothing(index: str, tmp_path: Path) -> None:
    with pytest.raises(
        LookupError, match=r"/json/demo-pkg/ lists no source distribution matching 'demo-pkg>=3'"
    ):
        fetch_sdist.fetch(Requirement("demo-pkg>=3"), tmp_path, f"{index}/json/")
