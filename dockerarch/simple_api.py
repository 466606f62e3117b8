"""The simple repository API of Python package indexes (PEP 503 HTML, PEP 691 JSON), read one way
for the whole package: what upload compares against and what a wheel set resolves from.

A project's page lists its files with their hashes (the URL's ``#sha256=`` fragment, or the JSON
``hashes``), ``requires-python`` (PEP 503's ``data-requires-python``), whether a file is yanked
(PEP 592) and whether its core metadata is served beside it (PEP 658/714: ``FILE.metadata``).

Written here rather than taken from pypi-simple: this very file is copied into build contexts
(accel.prepare_context) and read by data/toolchain/fetch-sdist inside the build stage, whose
emulated Python has the standard library and nothing else; one reader for the host and the build
means one way of reading a page. It uses the standard library only, for that reason.
"""

from __future__ import annotations

import html
import html.parser
import json
import urllib.parse
from dataclasses import dataclass, field

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{SIMPLE_JSON}, text/html;q=0.1"


@dataclass(frozen=True, kw_only=True)
class IndexFile:
    """One file of a project's page."""

    filename: str
    url: str  # absolute, without the fragment
    hashes: dict[str, str] = field(default_factory=dict)  # algorithm -> hex digest
    requires_python: str | None = None
    yanked: bool = False
    metadata: dict[str, str] | None = None  # PEP 658: served as URL.metadata, with these hashes

    @property
    def sha256(self) -> str:
        return self.hashes.get("sha256", "")


def redacted(url: str) -> str:
    """``url`` without its userinfo (``user:token@``): what is printed or written down of an
    index or file URL. The credentials stay only in the request that needs them (pip and uv
    print ``****`` in their place; a manifest or an error keeps nothing of them)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _metadata_value(value: object) -> dict[str, str] | None:
    """PEP 658/714's attribute or key: absent/false (none), true (no hashes) or hashes."""
    if value is None or value is False or value == "false":
        return None
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str) and "=" in value:
        algo, _, digest = value.partition("=")
        return {algo: digest}
    return {}


class _Anchors(html.parser.HTMLParser):
    """The anchors of a PEP 503 page with their attributes and text."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open, self._text = dict(attrs), ""

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, self._text.strip()))
            self._open = None


def parse_project_page(body: bytes, content_type: str, base_url: str) -> list[IndexFile]:
    """A project's simple page, JSON (PEP 691) or HTML (PEP 503), as its files: only those
    whose name is one plain file name and whose URL is of the page's own kind (a page on the web
    links web files; only a file:// index links files on this machine)."""
    return [f for f in _page_files(body, content_type, base_url) if _acceptable(f, base_url)]


def _acceptable(file: IndexFile, base_url: str) -> bool:
    web = ("http", "https")
    base, scheme = urllib.parse.urlsplit(base_url).scheme, urllib.parse.urlsplit(file.url).scheme
    same_kind = scheme in web if base in web else scheme == base
    name = file.filename
    plain = bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")
    return same_kind and plain


def _page_files(body: bytes, content_type: str, base_url: str) -> list[IndexFile]:
    files: list[IndexFile] = []
    if content_type.split(";")[0].strip() == SIMPLE_JSON:
        for entry in json.loads(body).get("files", []):
            url = urllib.parse.urljoin(base_url, entry["url"]).partition("#")[0]
            meta = entry.get("core-metadata", entry.get("dist-info-metadata"))
            files.append(IndexFile(
                filename=entry["filename"], url=url,
                hashes={str(k): str(v) for k, v in (entry.get("hashes") or {}).items()},
                requires_python=entry.get("requires-python") or None,
                yanked=bool(entry.get("yanked")), metadata=_metadata_value(meta),
            ))  # fmt: skip
        return files
    parser = _Anchors()
    parser.feed(body.decode("utf-8", errors="replace"))
    for attrs, text in parser.anchors:
        url = urllib.parse.urljoin(base_url, html.unescape(attrs.get("href") or ""))
        path, _, fragment = url.partition("#")
        name = urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1]) or text
        algo, _, digest = fragment.partition("=")
        meta = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
        requires = attrs.get("data-requires-python")
        files.append(IndexFile(
            filename=name, url=path, hashes={algo: digest} if digest else {},
            requires_python=html.unescape(requires) if requires else None,
            yanked="data-yanked" in attrs,
            metadata=_metadata_value("true" if meta == "" else meta),
        ))  # fmt: skip
    return files


def project_url(index: str, project: str) -> str:
    """The page of ``project`` (a normalized name) on the simple index at ``index``."""
    return urllib.parse.urljoin(index.rstrip("/") + "/", project + "/")
