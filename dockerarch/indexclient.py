"""A package index over HTTP, for one board target: what it lists (PEP 503/691, read by
simple_api), creating a devpi index when it is missing, and uploads through the legacy upload API
(the form twine, flit and uv send), spoken directly with requests: no private interface of
another tool. Every request has a timeout."""

from __future__ import annotations

import hashlib
import re
import urllib.parse
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from packaging.utils import canonicalize_name, parse_wheel_filename

from dockerarch import simple_api
from dockerarch.artifacts import VerificationError
from dockerarch.config import IndexConfig
from dockerarch.errors import DockerarchError
from dockerarch.files import sha256_file
from dockerarch.indexcreds import CREDENTIALS_FIX, Credentials
from dockerarch.simple_api import IndexFile

Say = Callable[[str], None]
TIMEOUT = (10, 120)  # seconds: to connect, and between any two reads (a stalled index fails)


class PackageIndexError(DockerarchError):
    """The package index did not answer, refused, or holds something else under a name."""

    exit_code = 4


class Index:
    """One target's index: where uploads go and where pip reads."""

    def __init__(self, config: IndexConfig, target: str, creds: Credentials) -> None:
        self.config = config
        self.target = target
        self.upload_url = config.upload_url(target)
        self.simple_url = config.simple_url(target)
        self.creds = creds
        self.session = requests.Session()
        self.session.trust_env = False  # the user's own index is reached directly, never by proxy
        self.verify: str | bool = str(config.ca) if config.ca else True

    def _get(self, url: str, **kwargs: Any) -> requests.Response:
        try:
            return self.session.get(url, timeout=TIMEOUT, verify=self.verify, **kwargs)
        except requests.RequestException as exc:
            raise PackageIndexError(
                f"The package index at {self.config.server} does not answer ({_reason(exc)}); "
                "nothing was uploaded",
                fix="Start it (scripts/setup-host runs one at 127.0.0.1:3141) or point "
                "registry.yaml's index.url at one that runs, then run the same command again.",
            ) from None

    def published(self, project: str) -> dict[str, IndexFile]:
        """The files the index lists for ``project``, by file name."""
        url = f"{self.simple_url}{project}/"
        response = self._get(url, headers={"Accept": simple_api.ACCEPT})
        if response.status_code == 404:
            return {}
        if response.status_code != 200:
            raise PackageIndexError(
                f"The package index answered {response.status_code} {response.reason} for {url}",
                fix="Check registry.yaml's index.simple (where pip reads) and the index's log.",
            )
        files = simple_api.parse_project_page(response.content,
                                              response.headers.get("Content-Type", ""), response.url)  # fmt: skip
        return {f.filename: f for f in files}

    def sha256_of(self, file: IndexFile) -> str:
        """The sha256 of a file the index lists: the page's, or, when the page gives none, the
        file's own bytes downloaded and hashed (never assumed)."""
        if file.sha256:
            return file.sha256
        digest = hashlib.sha256()
        try:
            with self.session.get(
                file.url, timeout=TIMEOUT, verify=self.verify, stream=True
            ) as got:
                if got.status_code != 200:
                    raise PackageIndexError(
                        f"The index lists {file.filename} without a hash, and downloading it to "
                        f"compare answered {got.status_code} {got.reason} ({file.url})",
                        fix="Check the index's log; an index should list sha256 for every file.",
                    )
                for chunk in got.iter_content(1 << 20):
                    digest.update(chunk)
        except requests.RequestException as exc:
            raise PackageIndexError(
                f"The index lists {file.filename} without a hash, and downloading it to compare "
                f"failed: {_reason(exc)}",
                fix="Check that the index answers, then run the same command again.",
            ) from None
        return digest.hexdigest()

    def ensure(self, say: Say) -> None:
        """Make sure the target's index exists. devpi keeps indexes per user/name: one that is
        missing is created, non-volatile (a published file is never replaced), with no bases
        (pip on a board sees this target's wheels only), uploads by its owner only."""
        response = self._get(self.simple_url, headers={"Accept": "text/html"})
        if response.status_code != 404:
            return
        api = self._get(f"{self.config.server}/+api", headers={"Accept": "application/json"})
        path = urllib.parse.urlsplit(self.upload_url).path.strip("/").split("/")
        if api.status_code != 200 or "X-Devpi-Server-Version" not in api.headers or len(path) != 2:
            raise PackageIndexError(
                f"There is no index for target {self.target} at {self.simple_url} (404)",
                fix="Create it on the index server (one index per board target), or fix "
                "registry.yaml's index.url and index.simple.",
            )
        if self.creds.password is None:
            raise PackageIndexError(
                f"The index for target {self.target} does not exist yet, and creating it on "
                f"{self.config.server} needs credentials; {self.creds.source}",
                fix=CREDENTIALS_FIX,
            )
        body = {"type": "stage", "bases": [], "volatile": False, "acl_upload": [path[0]],
                "title": f"dockerarch wheels for {self.target}"}  # fmt: skip
        try:
            made = self.session.put(
                f"{self.config.server}/{path[0]}/{path[1]}", json=body, timeout=TIMEOUT,
                verify=self.verify, auth=(self.creds.username or "", self.creds.password),
                headers={"Accept": "application/json"},
            )  # fmt: skip
        except requests.RequestException as exc:
            raise PackageIndexError(f"Creating the index for {self.target} failed: {_reason(exc)}",
                                    fix="Check the index server, then run again.") from None  # fmt: skip
        if made.status_code in (401, 403):
            raise PackageIndexError(
                f"{self.config.server} refused to create the index {path[0]}/{path[1]} for "
                f"{self.creds.username} ({made.status_code}; credentials from {self.creds.source})",
                fix=CREDENTIALS_FIX,
            )
        if made.status_code not in (200, 201):
            raise PackageIndexError(
                f"{self.config.server} did not create the index {path[0]}/{path[1]}: "
                f"{made.status_code} {made.text[:200]}",
                fix="Check the index server's log.",
            )
        say(f"created index {path[0]}/{path[1]} for {self.target} (non-volatile, no bases)")

    def upload(self, path: Path, needs_apt: tuple[str, ...] = ()) -> None:
        """POST the wheel to the legacy upload API (the one twine, flit and uv speak), streamed,
        with a timeout for every read: an index that stalls is an error, not a hang."""
        from requests_toolbelt.multipart.encoder import MultipartEncoder

        fields = upload_form(path, needs_apt)
        with path.open("rb") as content:
            body = MultipartEncoder(
                fields=[*fields, ("content", (path.name, content, "application/octet-stream"))]
            )
            auth = (self.creds.username or "", self.creds.password) if self.creds.password else None
            try:
                response = self.session.post(
                    self.upload_url, data=body, auth=auth, timeout=TIMEOUT, verify=self.verify,
                    allow_redirects=False, headers={"Content-Type": body.content_type},
                )  # fmt: skip
            except requests.RequestException as exc:
                raise PackageIndexError(
                    f"Uploading {path.name} to {self.upload_url} failed: {_reason(exc)}",
                    fix="Check the index answers, then run the same command again: files already "
                    "published are not sent twice.",
                ) from None
        if response.status_code in (401, 403):
            raise PackageIndexError(
                f"The index at {self.upload_url} refused the upload of {path.name}: "
                f"{response.status_code} {response.reason} (credentials: {self.creds.source})",
                fix=CREDENTIALS_FIX,
            )
        if response.is_redirect or not 200 <= response.status_code < 300:
            raise PackageIndexError(
                f"The index at {self.upload_url} refused {path.name}: "
                f"{response.status_code} {response.reason} {response.text[:300].strip()}",
                fix="Check registry.yaml's index.url (the upload URL) and the index's log.",
            )


# Core metadata fields as the upload form names them (warehouse's legacy API): name -> form key.
_SINGLE = ("metadata_version", "name", "version", "summary", "description",
           "description_content_type", "author", "author_email", "maintainer", "maintainer_email",
           "license", "license_expression", "home_page", "download_url", "requires_python")  # fmt: skip
_MULTIPLE = {"classifiers": "classifiers", "platforms": "platform",
             "supported_platforms": "supported_platform", "requires_dist": "requires_dist",
             "provides_dist": "provides_dist", "obsoletes_dist": "obsoletes_dist",
             "requires_external": "requires_external", "provides_extra": "provides_extra",
             "dynamic": "dynamic", "license_files": "license_file"}  # fmt: skip


def upload_form(path: Path, needs_apt: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The upload form of a wheel: its core metadata (read with packaging, the name and version
    checked against the file's name), its tags and digests; ``needs_apt`` is carried as
    Requires-External (PEP 345) and said in the comment."""
    from packaging.metadata import parse_email
    from packaging.version import InvalidVersion, Version

    raw, _ = parse_email(wheel_metadata(path))
    name, version, _, tags = parse_wheel_filename(path.name)
    problems = []
    if canonicalize_name(str(raw.get("name", ""))) != name:
        problems.append(f"its Name is {raw.get('name')!r}, its file name says {name}")
    try:
        if Version(str(raw.get("version", ""))) != version:
            problems.append(f"its Version is {raw.get('version')!r}, its file name says {version}")
    except InvalidVersion:
        problems.append(f"its Version {raw.get('version')!r} is not a version")
    if not raw.get("metadata_version"):
        problems.append("it has no Metadata-Version")
    if problems:
        raise VerificationError(
            f"{path.name}'s METADATA is not what an index takes: {'; '.join(problems)}",
            fix="Rebuild the wheel (its build backend wrote inconsistent metadata); nothing was "
            "uploaded.",
        )
    form: list[tuple[str, str]] = [(":action", "file_upload"), ("protocol_version", "1"),
                                   ("filetype", "bdist_wheel"),
                                   ("pyversion", sorted({t.interpreter for t in tags})[0])]  # fmt: skip
    form += [(key, str(raw[key])) for key in _SINGLE if raw.get(key)]  # type: ignore[literal-required]
    for key, field_name in _MULTIPLE.items():
        form += [(field_name, str(v)) for v in raw.get(key) or ()]  # type: ignore[attr-defined]
    if raw.get("keywords"):
        form.append(("keywords", ",".join(raw["keywords"])))
    for label, url in (raw.get("project_urls") or {}).items():
        form.append(("project_urls", f"{label}, {url}"))
    if needs_apt:
        form += [("requires_external", p) for p in needs_apt]
        form.append(("comment", f"on the board first: apt install {' '.join(needs_apt)}"))
    digest = sha256_file(path)
    form.append(("sha256_digest", digest))
    return form


def wheel_metadata(path: Path) -> bytes:
    """The wheel's METADATA (PEP 658 serves it beside the file)."""
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist()
                 if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
                 and n.endswith("/METADATA")]  # fmt: skip
        if len(names) != 1:
            raise VerificationError(f"{path.name} has {len(names)} .dist-info/METADATA files",
                                    fix="Rebuild it: a wheel has exactly one.")  # fmt: skip
        return archive.read(names[0])


def _reason(exc: Exception) -> str:
    text = str(exc)
    match = re.search(r"\[Errno -?\d+\] [^')\]]+", text)
    if match:
        return match.group(0)
    return type(exc).__name__ if len(text) > 200 else text
