"""The package index client and upload without a server: the upload form read from the wheel,
a listing without a hash compared by the file's own bytes, an index that stalls, and what
manifest.json records when an upload fails part-way. The index is a stand-in session."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import requests

from dockerarch import indexclient, pkgindex
from dockerarch.artifacts import VerificationError
from dockerarch.config import IndexConfig

from .test_pkgindex import TARGETS, built, make_wheel

CONFIG = IndexConfig()
SIMPLE = CONFIG.simple_url("debian-armv7")


class FakeIndex:
    """A requests.Session stand-in for every target's index: what was uploaded is listed (with
    or without hashes), a POST can stall."""

    def __init__(self, *, hashes: bool = True, stall_after: int | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.hashes, self.stall_after, self.posts = hashes, stall_after, []  # type: list[dict[str, str]]
        self.trust_env = True

    def _response(self, status: int, body: bytes = b"", kind: str = "text/html") -> Any:
        response = requests.Response()
        response.status_code, response._content = status, body
        response.headers["Content-Type"] = kind
        response.reason = "OK" if status == 200 else "Not Found"
        return response

    def get(self, url: str, **_: Any) -> Any:
        if "/+simple/" in url and not url.endswith("/+simple/"):  # a project's page
            links = "".join(f'<a href="/files/{n}' + (f"#sha256={hashlib.sha256(d).hexdigest()}"
                                                      if self.hashes else "") + f'">{n}</a>'
                            for n, d in self.files.items())  # fmt: skip
            response = self._response(200 if self.files else 404, links.encode())
            response.url = url
            return response
        if url.endswith("/+simple/"):  # the target's index exists
            return self._response(200)
        name = url.rsplit("/", 1)[-1]
        response = self._response(200, self.files[name])
        response.raw = __import__("io").BytesIO(self.files[name])
        return response

    def post(self, url: str, data: Any, **kwargs: Any) -> Any:
        assert kwargs["timeout"] == indexclient.TIMEOUT  # every upload has one
        if self.stall_after is not None and len(self.posts) >= self.stall_after:
            raise requests.ReadTimeout("Read timed out. (read timeout=120)")
        body = data.to_string()
        fields = {}
        for part in body.split(b"--" + data.boundary_value.encode())[1:-1]:
            head, _, value = part.partition(b"\r\n\r\n")
            name = head.split(b'name="', 1)[1].split(b'"', 1)[0].decode()
            if b"filename=" in head:
                self.files[head.split(b'filename="', 1)[1].split(b'"', 1)[0].decode()] = value[:-2]
            else:
                fields.setdefault(name, value[:-2].decode())
        self.posts.append(fields)
        return self._response(200)


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> FakeIndex:
    fake = FakeIndex()
    monkeypatch.setattr(indexclient.requests, "Session", lambda: fake)
    return fake


def test_the_upload_form_is_the_wheel_s_own_metadata(tmp_path: Path) -> None:
    path = make_wheel(tmp_path, "debian-armv7")
    form = indexclient.upload_form(path, ("libzstd1",))
    fields = dict(form)
    assert (fields[":action"], fields["name"], fields["version"], fields["pyversion"]) == (
        "file_upload", "demo", "1.0", "cp311")  # fmt: skip
    assert fields["filetype"] == "bdist_wheel"
    assert fields["sha256_digest"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert ("requires_external", "libzstd1") in form
    assert fields["comment"] == "on the board first: apt install libzstd1"


def test_metadata_that_contradicts_the_file_name_is_refused(tmp_path: Path) -> None:
    path = make_wheel(tmp_path, "debian-armv7")
    renamed = path.with_name(path.name.replace("demo-1.0", "other-2.0"))
    path.rename(renamed)
    with pytest.raises(VerificationError) as err:
        indexclient.upload_form(renamed)
    assert "its Name is 'demo', its file name says other" in err.value.problem
    assert "its Version is '1.0', its file name says 2.0" in err.value.problem


def test_upload_reads_back_and_records_each_wheel(tmp_path: Path, index: FakeIndex) -> None:
    wheel = built(tmp_path, "debian-armv7")
    said: list[str] = []
    (outcome,) = pkgindex.upload([wheel], CONFIG, state_dir=tmp_path, say=said.append)
    assert outcome.uploaded and index.posts[0]["name"] == "demo"
    published = json.loads((wheel.result / "manifest.json").read_text())["published"]
    assert published == [{"index": SIMPLE, "file": wheel.path.name, "sha256": wheel.sha256,
                          "url": f"{SIMPLE}demo/".rsplit("/dockerarch", 1)[0] + f"/files/{wheel.path.name}"}]  # fmt: skip
    # again: the same file is not sent twice
    (again,) = pkgindex.upload([wheel], CONFIG, state_dir=tmp_path, say=said.append)
    assert not again.uploaded and len(index.posts) == 1
    assert len(json.loads((wheel.result / "manifest.json").read_text())["published"]) == 1


def test_a_listing_without_a_hash_is_compared_by_the_file_s_bytes(
    tmp_path: Path, index: FakeIndex
) -> None:
    index.hashes = False
    wheel = built(tmp_path / "a", "debian-armv7")
    index.files[wheel.path.name] = wheel.path.read_bytes()
    said: list[str] = []
    (outcome,) = pkgindex.upload([wheel], CONFIG, state_dir=tmp_path, say=said.append)
    assert not outcome.uploaded and "sha256 compared" in said[-1]
    other = built(tmp_path / "b", "debian-armv7", extra="# another build\n")
    with pytest.raises(indexclient.PackageIndexError) as err:
        pkgindex.upload([other], CONFIG, state_dir=tmp_path, say=said.append)
    assert "already has" in err.value.problem and wheel.sha256[:16] in err.value.problem
    assert "published" not in json.loads((other.result / "manifest.json").read_text())


def test_a_stalled_index_fails_and_what_landed_before_is_recorded(
    tmp_path: Path, index: FakeIndex
) -> None:
    index.stall_after = 1
    first = built(tmp_path / "a", "debian-armv7")
    path = make_wheel(tmp_path, "debian-aarch64")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    second = pkgindex.Wheel(target=TARGETS["debian-aarch64"], path=path, sha256=digest,
                            result=first.result)  # fmt: skip
    with pytest.raises(indexclient.PackageIndexError) as err:
        pkgindex.upload([first, second], CONFIG, state_dir=tmp_path, say=lambda _l: None)
    assert "Read timed out" in err.value.problem and second.path.name in err.value.problem
    published = json.loads((first.result / "manifest.json").read_text())["published"]
    assert [p["file"] for p in published] == [first.path.name]


def test_credentials_never_cross_a_network_in_clear_text_unless_said(
    tmp_path: Path, index: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TWINE_USERNAME", "ci")
    monkeypatch.setenv("TWINE_PASSWORD", "s3cret-value")
    lan = "http://192.0.2.10:3141/dockerarch/{target}/"
    wheel = built(tmp_path, "debian-armv7")
    with pytest.raises(indexclient.PackageIndexError) as err:
        pkgindex.upload([wheel], IndexConfig(url=lan, simple=lan + "+simple/"),
                        state_dir=tmp_path, say=lambda _l: None)  # fmt: skip
    assert "clear text" in err.value.problem and "insecure: true" in err.value.fix
    assert "s3cret" not in err.value.render() and not index.posts
    said = IndexConfig(url=lan, simple=lan + "+simple/", insecure=True)
    (outcome,) = pkgindex.upload([wheel], said, state_dir=tmp_path, say=lambda _l: None)
    assert outcome.uploaded and len(index.posts) == 1
