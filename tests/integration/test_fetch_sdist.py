"""fetch-sdist, the native sdist download of hybrid builds, against a simple index served from
this process on 127.0.0.1 (PEP 691 JSON and PEP 503 HTML pages)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from ..unit.test_fetch_sdist import FILES, SDIST, fetch_sdist


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
        LookupError, match=r"no source distribution matching 'demo-pkg>=3' on \S+/json/demo-pkg/"
    ):
        fetch_sdist.fetch(Requirement("demo-pkg>=3"), tmp_path, f"{index}/json/")


def test_fetch_takes_the_indexes_dockerarch_exports_as_pip_merges_them(
    index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's index is the one pip's configuration names on dockerarch's machine, with its
    extra indexes (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL from the dockerarch-index secret): an
    index without the project is passed over, the chosen among them all as pip chooses."""
    monkeypatch.setenv("PIP_INDEX_URL", f"{index}/nothing/")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"{index}/html/")
    assert fetch_sdist.main(["fetch-sdist", "demo-pkg==1.1", str(tmp_path)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["demo_pkg-1.1.tar.gz"]
    monkeypatch.delenv("PIP_INDEX_URL")
    with pytest.raises(SystemExit, match="PIP_INDEX_URL is not set"):
        fetch_sdist.main(["fetch-sdist", "demo-pkg>=1", str(tmp_path / "again")])
