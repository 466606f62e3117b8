"""The package indexes a set is resolved from, as a client: project pages from the first index
that has a project (uv's order: the extra indexes before the default), --find-links directories
beside them, files downloaded into the downloads cache by sha256 (checked, retried, never left
half-written), and what a build of an sdist once said it needs.
"""

from __future__ import annotations

import email.message
import email.parser
import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import requests
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)

from dockerarch import localtree, pipconfig, simple_api
from dockerarch.files import sha256_file, write_atomic
from dockerarch.pipconfig import PipConfig, default_index
from dockerarch.pyenv import PythonTarget
from dockerarch.pyreqs import Wants
from dockerarch.sets.errors import ResolutionError
from dockerarch.sets.metadata import wheel_metadata
from dockerarch.simple_api import IndexFile

Say = Callable[[str], None]
LEARNED = "requires-dist"  # beside an sdist in the downloads cache: what its wheel said
TIMEOUT = 60  # seconds for one request to an index


class Indexes:
    """Project pages and files from the indexes of a set, downloads kept in ``cache`` by
    sha256 (checked against the index's hash, and the requirement's when it has one)."""

    def __init__(self, wants: Wants, cache: Path, session: requests.Session | None = None,
                 pip: PipConfig | None = None) -> None:  # fmt: skip
        # The indexes given to dockerarch (--extra-index-url, a requirements file's) are asked
        # first, in order, and a name is taken from the first that has it (uv's first-index rule):
        # a private name there is never taken from a public index (dependency confusion). Then
        # pip's own configuration, read as pip reads it (pip.conf, PIP_*), and the default index:
        # pip merges those, so a set resolves from them as this machine's pip would.
        self.pip = pipconfig.read() if pip is None else pip
        self.first = list(wants.extra_index_urls)
        merged = [u for u in self.pip.extra_index_urls if u not in self.first]
        if wants.index_url or not self.pip.no_index:
            merged.append(wants.index_url or self.pip.index_url or default_index())
        self.merged = merged
        self.cache = cache
        self.session = session or retrying_session()
        self._pages: dict[str, tuple[str, list[IndexFile]]] = {}
        self.directories = wants.directories
        self.find_links = [*wants.find_links, *(d for d in _pip_find_links(self.pip)
                                                 if d not in wants.find_links)]  # fmt: skip
        self._linked: dict[str, list[IndexFile]] | None = None

    @property
    def urls(self) -> list[str]:
        """Every index asked, in order (credentials removed)."""
        return [simple_api.redacted(u) for u in (*self.first, *self.merged)]

    def described(self) -> str:
        """Where names come from, for the progress: said once per set."""
        first = [simple_api.redacted(u) for u in self.first]
        merged = " + ".join(simple_api.redacted(u) for u in self.merged)
        parts = ([", ".join(first) + " (asked first)"] if first else []) + (
            [f"{merged} (merged, as pip merges them)"] if merged else [])  # fmt: skip
        line = "indexes: " + ", then ".join(parts or ["none (find-links only)"])
        if self.pip.files or self.pip.environment:
            line += f"; pip's configuration: {self.pip.origin()}"
        if self.pip.extra_index_urls:
            line += (". A private name on an index in pip's configuration can be shadowed by a "
                     "higher version on the default index: give that index as --extra-index-url "
                     "to have it asked first")  # fmt: skip
        return line

    def files(self, name: str) -> tuple[str, list[IndexFile]]:
        """(index URL, files) of project ``name`` from the first dockerarch-given index that has
        it, else from pip's configured and default indexes together (a file name seen twice is
        taken from the first); a project given as a directory has its tree's sdist only (the
        indexes are not asked)."""
        if name not in self._pages and name in self.directories:
            tree = self.directories[name]
            _, sdist = localtree.pack(tree, self.cache)
            file = IndexFile(filename=sdist.name, url=sdist.as_uri(),
                             hashes={"sha256": sdist.parent.name})  # fmt: skip
            self._pages[name] = (f"directory {tree}", [file])
        if name not in self._pages:
            found: tuple[str, list[IndexFile]] = ("", [])
            for index in self.first:
                page = self._page(index, name)
                if page is not None:
                    found = (simple_api.redacted(index), page)
                    break
            else:
                where, seen, files = [], set[str](), []
                for index in self.merged:
                    page = self._page(index, name)
                    if page is not None:
                        where.append(simple_api.redacted(index))
                        files += [f for f in page if f.filename not in seen]
                        seen |= {f.filename for f in page}
                found = (" + ".join(where), files)
            linked = self.linked().get(name, [])
            if linked:  # pip's --find-links: its files beside the index's
                where_linked = ", ".join(str(d) for d in self.find_links)
                found = (f"{where_linked} and {found[0]}" if found[0] else where_linked,
                         [*linked, *found[1]])  # fmt: skip
            self._pages[name] = found
        return self._pages[name]

    def _page(self, index: str, name: str) -> list[IndexFile] | None:
        """The files on ``index``'s page of ``name``, None where the index has no such project.
        A file:// index is a directory of PEP 503 pages (NAME/index.html), as pip reads it."""
        url = simple_api.project_url(index, name)
        if url.startswith("file:"):
            page = Path(url2pathname(urlparse(url).path)) / "index.html"
            try:
                body = page.read_bytes()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise ResolutionError(f"The package index page {page} cannot be read: {exc}",
                                      fix="Check the index directory (pip's configuration or "
                                      "--extra-index-url).") from exc  # fmt: skip
            return simple_api.parse_project_page(body, "text/html", url)
        response = self._get(url, headers={"Accept": simple_api.ACCEPT})
        if response.status_code == 404:
            return None
        self._check(response, f"the page of {name}")
        kind = response.headers.get("Content-Type", "")
        return simple_api.parse_project_page(response.content, kind, response.url)

    def linked(self) -> dict[str, list[IndexFile]]:
        """{canonical name: files} of the --find-links directories' wheels and sdists (read
        once; each file's sha256 from its bytes)."""
        if self._linked is None:
            self._linked = {}
            for directory in self.find_links:
                for path in sorted(directory.iterdir()):
                    name = _file_project(path.name)
                    if name is not None and path.is_file():
                        file = IndexFile(filename=path.name, url=path.as_uri(),
                                         hashes={"sha256": sha256_file(path)})  # fmt: skip
                        self._linked.setdefault(name, []).append(file)
        return self._linked

    def _get(self, url: str, **kwargs: Any) -> requests.Response:
        try:
            return self.session.get(url, timeout=TIMEOUT, **kwargs)
        except requests.RequestException as exc:
            raise ResolutionError(
                f"The package index did not answer for {simple_api.redacted(url)}: "
                f"{type(exc).__name__}",
                fix="Check the index URL (--index-url/--extra-index-url, or the requirements "
                "file's) and the network, then run again.",
            ) from exc

    @staticmethod
    def _check(response: requests.Response, what: str) -> None:
        if response.status_code != 200:
            raise ResolutionError(
                f"The package index answered {response.status_code} for {what} "
                f"({simple_api.redacted(response.url)})",
                fix="Check the index URL and its credentials, then run again.",
            )

    def download(self, file: IndexFile, allowed: frozenset[str] | None = None) -> Path:
        """``file`` in the cache, its sha256 checked; written under a temporary name first."""
        if allowed is not None and file.sha256 not in allowed:
            raise ResolutionError(
                f"{file.filename}'s sha256 ({file.sha256 or 'not given by the index'}) is not "
                "one the requirements allow",
                fix="Check the --hash lines of the requirements file against the file's "
                "(pip hash FILE).",
            )
        path = self._cache_dir(file) / file.filename
        if path.is_file() and (not file.sha256 or sha256_file(path) == file.sha256):
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.part")
        try:
            self._fetch(file, partial)
            digest = sha256_file(partial)
        except BaseException:
            partial.unlink(missing_ok=True)  # an interrupted or broken download leaves nothing
            raise
        if file.sha256 and digest != file.sha256:
            partial.unlink()
            raise ResolutionError(
                f"{file.filename} downloaded from {simple_api.redacted(file.url)} has sha256 "
                f"{digest}, but the index "
                f"lists {file.sha256}",
                fix="The index or something between it and this machine changed the file; "
                "nothing of it was kept. Run again, or ask the index's owner.",
            )
        os.replace(partial, path)
        return path

    def _fetch(self, file: IndexFile, partial: Path) -> None:
        if file.url.startswith("file:"):  # a --find-links directory's
            shutil.copyfile(Path(url2pathname(urlparse(file.url).path)), partial)
            return
        response = self._get(file.url, stream=True)
        self._check(response, file.filename)
        try:
            with partial.open("wb") as out:
                for chunk in response.iter_content(1 << 20):
                    out.write(chunk)
        except requests.RequestException as exc:
            raise ResolutionError(
                f"Downloading {file.filename} from {simple_api.redacted(file.url)} broke off: "
                f"{type(exc).__name__}",
                fix="Nothing of it was kept; run the same command again.",
            ) from exc

    def metadata(self, file: IndexFile) -> email.message.Message:
        """A wheel's core metadata: PEP 658's file when served, else from the wheel itself."""
        if file.metadata is not None:
            response = self._get(file.url + ".metadata")
            if response.status_code == 200:
                expected = file.metadata.get("sha256")
                import hashlib

                if expected and hashlib.sha256(response.content).hexdigest() != expected:
                    raise ResolutionError(
                        f"The metadata of {file.filename} does not match its hash on the index",
                        fix="Run again; if it persists, the index serves a wrong file.",
                    )
                return email.parser.BytesParser().parsebytes(response.content)
        return wheel_metadata(self.download(file))

    def _cache_dir(self, file: IndexFile) -> Path:
        """Where ``file`` (and what is learned of it) is kept: by sha256."""
        key = file.sha256 or _url_key(file.url)
        return self.cache / key[:2] / key

    def _learned_path(self, file: IndexFile, target: PythonTarget) -> Path:
        # per machine and Python: a setup.py may ask for more on one board than on another
        machine, (major, minor) = target.markers["platform_machine"], target.python
        return self._cache_dir(file) / f"{LEARNED}-{machine}-cp{major}{minor}.json"

    def learned(self, file: IndexFile, target: PythonTarget) -> list[str] | None:
        """The Requires-Dist a build of the sdist ``file`` for ``target`` wrote in its wheel
        (learn), None if it was never built here."""
        try:
            lines = json.loads(self._learned_path(file, target).read_text())
        except (OSError, ValueError):
            return None
        return [str(line) for line in lines] if isinstance(lines, list) else None

    def learn(self, file: IndexFile, target: PythonTarget, lines: Sequence[str]) -> None:
        """Keep what a build of the sdist ``file`` for ``target`` said it needs at run time: the
        next resolution knows it from the start."""
        path = self._learned_path(file, target)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(list(lines), indent=1) + "\n").encode())


def retrying_session() -> requests.Session:
    """A session whose GETs are tried again on a refused connection, a reset or a 429/5xx
    answer, waiting longer each time (urllib3's Retry: 0.25 s doubling, 5 tries more), as pip's are."""
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    retry = Retry(total=5, connect=5, read=5, status=5, backoff_factor=0.25,
                  status_forcelist=(429, 500, 502, 503, 504), allowed_methods=("GET", "HEAD"),
                  raise_on_status=False)  # fmt: skip
    session = requests.Session()
    for prefix in ("http://", "https://"):
        session.mount(prefix, HTTPAdapter(max_retries=retry))
    return session


def _pip_find_links(pip: PipConfig) -> list[Path]:
    """pip's configured find-links that are directories here (pip reads web pages too; a set
    takes only directories, and a configured one that is not there is passed over, as pip
    passes it over with a warning)."""
    found = []
    for value in pip.find_links:
        if "://" in value and not value.startswith("file:"):
            continue
        path = (
            Path(url2pathname(urlparse(value).path)) if value.startswith("file:") else Path(value)
        )
        if path.expanduser().is_dir():
            found.append(path.expanduser().resolve())
    return found


def _file_project(filename: str) -> str | None:
    """The canonical project name of a wheel or sdist file name, None for any other file."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[0])
        if filename.endswith((".tar.gz", ".zip")):
            return str(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def _url_key(url: str) -> str:
    import hashlib

    return "url-" + hashlib.sha256(url.encode()).hexdigest()[:32]
