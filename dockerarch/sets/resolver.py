"""resolvelib's provider over the indexes, for one board target: candidates (a version's best
wheel for the board, else its sdist), their requirements under the board's markers, hashes and
Requires-Python; and what a file says of itself compared with the candidate it was resolved as.
"""

from __future__ import annotations

import email.message
import email.parser
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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

from dockerarch.errors import DockerarchError
from dockerarch.pyenv import PythonTarget
from dockerarch.pyreqs import ALL
from dockerarch.sets.errors import ResolutionError
from dockerarch.sets.indexes import Indexes
from dockerarch.sets.metadata import sdist_members, static_requires
from dockerarch.simple_api import IndexFile

MAX_ROUNDS = 200_000  # the resolver's rounds before it gives up, as pip has it


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
class Asked:
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
        self.extras_chosen: dict[str, set[str]] = {}  # name -> the extras a resolution asked of it

    # resolvelib's interface
    def identify(self, requirement_or_candidate: Asked | Candidate) -> str:
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

    def find_matches(self, identifier: str, requirements: Mapping[str, Iterator[Asked]],
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

    def is_satisfied_by(self, requirement: Asked, candidate: Candidate) -> bool:
        return requirement.requirement.specifier.contains(candidate.version, prereleases=True)

    def get_dependencies(self, candidate: Candidate) -> list[Asked]:
        found = [Asked(Requirement(f"{candidate.name}=={candidate.version}"), candidate.key)
                 ] if candidate.extras else []  # fmt: skip
        requires = self.requires(candidate)
        said = self.requires_python.get(candidate.key)
        if said and not _python_ok(said, self.python):
            self.python_refused[candidate.key] = said
            # its metadata excludes the board's Python (the index page did not say so): a
            # requirement no version of it meets but another, so the resolver backtracks
            return [Asked(Requirement(f"{candidate.name}!={candidate.version}"), candidate.key)]
        for requirement in requires:
            marker = requirement.marker
            if marker is None or any(marker.evaluate({**self.target.markers, "extra": e})
                                     for e in (candidate.extras or {""})):  # fmt: skip
                found.append(Asked(without_marker(requirement), candidate.key))
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
                parse_requirement(line, candidate) for line in self._requires_lines(candidate)
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


def without_marker(requirement: Requirement) -> Requirement:
    """A requirement without its marker (evaluated already)."""
    plain = Requirement(str(requirement))
    plain.marker = None
    return plain


def parse_requirement(line: str, candidate: Candidate) -> Requirement:
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


def resolve_roots(provider: Provider, roots: list[Asked]) -> dict[str, Candidate]:
    from resolvelib import BaseReporter, ResolutionImpossible, ResolutionTooDeep, Resolver

    resolver: Resolver[Asked, Candidate, str] = Resolver(provider, BaseReporter())
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
    for cand in result.mapping.values():  # old[fast]: what was asked of it, for its node
        if cand.extras:
            provider.extras_chosen.setdefault(cand.name, set()).update(cand.extras)
    return {ident: cand for ident, cand in result.mapping.items() if not cand.extras}
