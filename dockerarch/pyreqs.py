"""What a wheel set is asked for: requirements files (``-r``), constraints files (``-c``) and
``--package`` specs, read as pip reads them.

The format is pip's: one requirement a line (PEP 508, markers included), ``#`` comments, ``\\``
continuations, per-line ``--hash=sha256:...``, and the options ``-r``/``--requirement``,
``-c``/``--constraint``, ``-i``/``--index-url``, ``--extra-index-url``, ``--require-hashes``,
``--no-binary`` (comma-separated names, ``:all:``, ``:none:``; as pip takes it) and
``-f``/``--find-links`` with a directory of wheels and sdists (a vendor's, say; relative to the
requirements file where it exists there, as pip takes it).
A line may also be a project's directory (``./my_ext``, ``/src/my_ext``, ``file:///src/my_ext``,
relative to the current directory as pip takes it): that project, by its static name and version,
built from the tree as it is (localtree); ``-e DIR`` (pip freeze's and pip-compile's editable
local project) is the same project, built as a regular wheel: an editable install points at
this machine's tree, which a board does not have. Anything else pip would take (editable VCS
checkouts, URLs, ``--find-links`` to a web page) is refused by name and line, never ignored: a set that
silently lost a line would install something else on the board than the file says.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidName, canonicalize_name

from dockerarch.errors import UsageError
from dockerarch.localtree import local_spec
from dockerarch.recipes import PackageSpec, directory_named, local_package


@dataclass(frozen=True, kw_only=True)
class Wanted:
    """One requirement line and where it came from."""

    requirement: Requirement
    where: str  # 'requirements.txt:3', or '--package'
    hashes: frozenset[str] = frozenset()  # sha256 hex digests the line allows
    local: Path | None = None  # a project's directory on this machine: NAME==VERSION from it
    editable: bool = False  # given as -e DIR: built as a regular wheel all the same

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.name)


@dataclass(kw_only=True)
class Wants:
    """Every requirement and constraint of a set, and where to look for them."""

    requirements: list[Wanted] = field(default_factory=list)
    constraints: list[Wanted] = field(default_factory=list)
    build_constraints: list[Wanted] = field(default_factory=list)  # for build environments only
    index_url: str | None = None  # None: pip's own default
    extra_index_urls: list[str] = field(default_factory=list)
    require_hashes: bool = False
    # every build environment's file needs a --hash in the build constraints (or the
    # requirements): a build-constraints file with hashes, or --require-hashes
    build_require_hashes: bool = False
    # built from their sdists even where the index has a wheel that fits (pip's --no-binary;
    # ALL: every package of the set, not the build tools of their build environments)
    no_binary: set[str] = field(default_factory=set)
    find_links: list[Path] = field(default_factory=list)  # directories of wheels and sdists

    @property
    def directories(self) -> dict[str, Path]:
        """{canonical name: directory} of the projects given as directories."""
        return {w.name: w.local for w in self.requirements if w.local is not None}

    def hashes_for(self, name: str) -> frozenset[str] | None:
        """The sha256 digests a file of ``name`` may have (None: any). With --require-hashes a
        requirement without hashes allows none."""
        if not self.require_hashes or name in self.directories:  # a directory: its own tree
            return None
        found: set[str] = set()
        for wanted in (*self.requirements, *self.constraints):
            if wanted.name == name:
                found |= wanted.hashes
        return frozenset(found)

    def build_hashes_for(self, name: str) -> frozenset[str] | None:
        """The sha256 digests a build environment's file of ``name`` may have (None: any): with
        hash checking on (--require-hashes, or hashes in the requirements or the build
        constraints), those of its --build-constraint lines and of the set's own lines for it; a
        build requirement without any allows none."""
        if not (self.require_hashes or self.build_require_hashes) or name in self.directories:
            return None
        found: set[str] = set()
        for wanted in (*self.build_constraints, *self.requirements, *self.constraints):
            if wanted.name == name:
                found |= wanted.hashes
        return frozenset(found)


_OPTION_WITH_VALUE = {"-r": "requirement", "--requirement": "requirement", "-c": "constraint",
                      "--constraint": "constraint", "-i": "index-url", "--index-url": "index-url",
                      "--extra-index-url": "extra-index-url", "--no-binary": "no-binary",
                      "-f": "find-links", "--find-links": "find-links"}  # fmt: skip
_HASH = re.compile(r"^sha256:([0-9a-f]{64})$")
_DIRECTORY_LINE = re.compile(r"(.*?)\s*(\[[^\]]*\])?\s*(?:;\s*(.*))?", re.S)
ALL = ":all:"


def add_no_binary(value: str, into: set[str], where: str) -> None:
    """pip's ``--no-binary`` value into ``into``: comma-separated project names, ``:all:``,
    ``:none:`` (clears what came before)."""
    for word in (w.strip() for w in value.split(",")):
        if word == ":none:":
            into.clear()
        elif word == ALL:
            into.add(ALL)
        else:
            try:
                into.add(canonicalize_name(word, validate=True))
            except InvalidName:
                raise _bad(where, f"--no-binary {value!r}: {word!r} is not a project name",
                           "Give project names separated by commas (--no-binary numpy,scipy), "
                           ":all: or :none:, as pip takes them.") from None  # fmt: skip


def _logical_lines(path: Path) -> list[tuple[int, str]]:
    """(first line number, text) with comments gone and continuations joined."""
    try:
        raw = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"Cannot read requirements file {path}: {exc}", fix="Check the path given to -r/-c."
        ) from exc
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(raw, 1):
        line = re.sub(r"(^|\s)#.*$", "", line)
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text:
            lines.append((start, text))
    if pending.strip():
        lines.append((start, pending.strip()))
    return lines


def _bad(where: str, what: str, fix: str) -> UsageError:
    return UsageError(f"{where}: {what}", fix=fix)


def read_file(path: Path, wants: Wants, *, constraint: bool = False,
              seen: frozenset[Path] = frozenset()) -> None:  # fmt: skip
    """Add ``path``'s lines (and those of the files it names) to ``wants``."""
    path = path.expanduser()
    if path.resolve() in seen:
        raise UsageError(f"{path} includes itself (through -r or -c)", fix="Remove the loop.")
    seen = seen | {path.resolve()}
    for number, text in _logical_lines(path):
        where = f"{path}:{number}"
        if text.startswith("-"):
            words = shlex.split(text)
            option, _, value = words[0].partition("=")
            rest = words[1:]
            if option == "--require-hashes" and not value and not rest:
                wants.require_hashes = True
                continue
            if option in ("-e", "--editable"):
                # the rest of the line as written (shlex would drop a marker's quotes)
                given = value or (text.split(None, 1)[1] if rest else "")
                wanted = _editable(given, where, constraint=constraint)
                wants.requirements.append(wanted)
                continue
            kind = _OPTION_WITH_VALUE.get(option)
            if kind is None:
                raise _bad(where, f"dockerarch does not take {option} in a requirements file",
                           "A set takes requirements, -r, -c, -i/--index-url, --extra-index-url, "
                           "--no-binary, -f/--find-links DIR, --hash and --require-hashes, and "
                           "projects by their directory (./DIR, -e ./DIR); put other options on "
                           "the command line.")  # fmt: skip
            if not value:
                if len(rest) != 1:
                    raise _bad(where, f"{option} takes one value", f"Write it as {option} VALUE.")
                value = rest[0]
            elif rest:
                raise _bad(where, f"{option} takes one value", f"Write it as {option}=VALUE.")
            if kind in ("requirement", "constraint"):
                included = Path(value) if Path(value).is_absolute() else path.parent / value
                read_file(included, wants, constraint=constraint or kind == "constraint", seen=seen)
            elif kind == "index-url":
                wants.index_url = value
            elif kind == "no-binary":
                add_no_binary(value, wants.no_binary, where)
            elif kind == "find-links":
                # pip: relative to the requirements file when it exists there
                beside = path.parent / value
                add_find_links(str(beside) if beside.is_dir() else value, wants, where)
            else:
                wants.extra_index_urls.append(value)
            continue
        wanted = parse_line(text, where)
        if constraint and wanted.local is not None:
            raise _bad(where, f"{text} is a directory in a constraints file",
                       "Constraints pin versions of what the requirements name; name the "
                       "project's directory in the requirements file (-r).")  # fmt: skip
        (wants.constraints if constraint else wants.requirements).append(wanted)
        if wanted.hashes:
            wants.require_hashes = True


def add_find_links(value: str, wants: Wants, where: str) -> None:
    """A --find-links directory (or file:// URL of one) into ``wants``; a web page is refused."""
    try:
        directory = directory_named(value) or Path(value)
    except UsageError as exc:
        raise _bad(where, exc.problem, exc.fix or "") from None
    if "://" in value and not value.startswith("file:"):
        raise _bad(where, f"--find-links {value} is a web page",
                   "A set takes --find-links as a directory of wheels and sdists on this machine; "
                   "give a web index with --extra-index-url.")  # fmt: skip
    if not directory.expanduser().is_dir():
        raise _bad(where, f"--find-links {value}: no such directory",
                   "Give a directory that holds the wheels and sdists (pip's --find-links DIR).")  # fmt: skip
    found = directory.expanduser().resolve()
    if found not in wants.find_links:
        wants.find_links.append(found)


def _editable(given: str, where: str, *, constraint: bool) -> Wanted:
    """``-e DIR``: the project in DIR, as a directory line is (a VCS or URL checkout refused)."""
    if constraint:
        raise _bad(where, f"-e {given} is an editable project in a constraints file",
                   "Constraints pin versions of what the requirements name; name the project's "
                   "directory in the requirements file (-r).")  # fmt: skip
    if not given:
        raise _bad(where, "-e takes one value", "Write it as -e ./DIR.")
    path, _, _ = _DIRECTORY_LINE.fullmatch(given).groups()  # type: ignore[union-attr]
    if _directory(path, where) is None:
        raise _bad(where, f"-e {given} is not a directory on this machine",
                   "A set builds an editable project from its checkout: check it out and name "
                   "its directory (-e ./DIR or ./DIR).")  # fmt: skip
    return dataclasses.replace(parse_line(given, where), editable=True)


def parse_line(text: str, where: str) -> Wanted:
    """One requirement with its ``--hash`` options."""
    spec, *options = re.split(r"\s+(?=--)", text.strip())
    hashes: set[str] = set()
    for option in options:
        name, _, value = option.partition("=")
        if name != "--hash" or not value:
            raise _bad(where, f"'{option}' is not an option a requirement line takes",
                       "Only --hash=sha256:HEX may follow a requirement.")  # fmt: skip
        found = _HASH.match(value.strip())
        if not found:
            raise _bad(
                where,
                f"{value} is not a sha256 hash",
                "Write hashes as --hash=sha256:<64 hex digits> (pip hash FILE prints one).",
            )
        hashes.add(found.group(1))
    # a directory, as pip takes it: ./DIR[EXTRAS]; MARKER
    path, extras, marker = _DIRECTORY_LINE.fullmatch(spec).groups()  # type: ignore[union-attr]
    directory = _directory(path, where)
    if directory is not None:
        if hashes:
            raise _bad(where, f"{spec} is a directory, which has no hash to check",
                       "Remove its --hash options; a directory's sdist is made from the tree "
                       "each run (its sha256 is in the set's manifest).")  # fmt: skip
        local, project = directory
        pinned = f"{project.name}{extras or ''}=={project.version}" + (
            f"; {marker}" if marker else ""
        )
        try:
            requirement = Requirement(pinned)
        except InvalidRequirement as exc:
            raise _bad(
                where, f"'{spec}': {exc}", "Write ./DIR[EXTRAS]; MARKER, as pip takes it."
            ) from exc
        return Wanted(requirement=requirement, where=where, local=local)
    try:
        requirement = Requirement(spec)
    except InvalidRequirement as exc:
        raise _bad(where, f"'{spec}' is not a requirement: {exc}",
                   "Write NAME[EXTRAS]SPECIFIER; MARKER, as pip takes it.") from exc  # fmt: skip
    # NAME @ file:///DIR, as pip-compile writes a local project
    if requirement.url and requirement.url.startswith("file:"):
        directory = _directory(requirement.url, where)
        if directory is not None:
            local, project = directory
            if canonicalize_name(project.name) != canonicalize_name(requirement.name):
                raise _bad(where, f"{requirement.url} is {project.name}, not {requirement.name}",
                           f"Write {project.name} @ {requirement.url}.")  # fmt: skip
            return Wanted(requirement=Requirement(f"{project.name}=={project.version}"),
                          where=where, local=local)  # fmt: skip
    if requirement.url:
        raise _bad(where, f"'{spec}' names a URL",
                   "A set is resolved from package indexes and directories: check the "
                   "project out and name its directory (./DIR), or publish it to an index "
                   "(dockerarch upload).")  # fmt: skip
    return Wanted(requirement=requirement, where=where, hashes=frozenset(hashes))


def _directory(spec: str, where: str) -> tuple[Path, PackageSpec] | None:
    """(directory, its project) when ``spec`` names a directory; its errors name the line."""
    try:
        local = local_spec(spec)
        return None if local is None else (local, local_package(local))
    except UsageError as exc:
        raise _bad(where, exc.problem, exc.fix or "") from None


def read_wants(requirement_files: list[Path], constraint_files: list[Path], packages: list[str],
               *, index_url: str | None = None, extra_index_urls: list[str] | None = None,
               require_hashes: bool = False, build_constraint_files: list[Path] | None = None,
               no_binary: list[str] | None = None,
               find_links: list[str] | None = None) -> Wants:  # fmt: skip
    """Everything a set is asked for, from the command line's -r, -c, --build-constraint,
    --no-binary, --find-links and --package."""
    wants = Wants(require_hashes=require_hashes)
    for path in requirement_files:
        read_file(path, wants)
    for path in constraint_files:
        read_file(path, wants, constraint=True)
    for path in build_constraint_files or []:
        # uv's and pip's --build-constraint: pins for every build environment, none for the set
        builds = Wants()
        read_file(path, builds, constraint=True)
        if builds.index_url or builds.extra_index_urls or builds.no_binary or builds.find_links:
            raise _bad(str(path), "a build-constraints file names an index or --no-binary",
                       "Give indexes and --no-binary on the command line or in a requirements "
                       "file; a build-constraints file holds pins, with their hashes.")  # fmt: skip
        # hashes (uv's --build-constraint takes them): every build environment is then checked
        wants.build_require_hashes |= builds.require_hashes
        wants.build_constraints.extend(builds.constraints)
    for spec in packages:
        wants.requirements.append(parse_line(spec, "--package"))
    if index_url:
        wants.index_url = index_url
    wants.extra_index_urls.extend(extra_index_urls or [])
    for value in no_binary or []:  # after the files, as pip applies the command line's
        add_no_binary(value, wants.no_binary, "--no-binary")
    for value in find_links or []:
        add_find_links(value, wants, "--find-links")
    if not wants.requirements:
        raise UsageError(
            "Nothing to build: the requirements given name no package",
            fix="Give -r FILE with requirement lines, or --package NAME.",
        )
    directories: dict[str, Wanted] = {}
    for wanted in (w for w in wants.requirements if w.local is not None):
        other = directories.setdefault(wanted.name, wanted)
        if other.local != wanted.local:
            raise _bad(wanted.where, f"{wanted.name} is {wanted.local}, and {other.local} at "
                       f"{other.where}", "Name one directory for each project.")  # fmt: skip
    if wants.require_hashes:
        unhashed = [w for w in wants.requirements if not w.hashes and not w.local]
        if unhashed:
            raise _bad(unhashed[0].where, f"{unhashed[0].requirement} has no --hash, and "
                       "hashes are required (the file has some, or --require-hashes)",
                       "Give every requirement its hashes (pip hash FILE, or pip-compile "
                       "--generate-hashes), or none.")  # fmt: skip
    return wants
