"""Checks every artifact before it lands in the output directory, and the manifest beside them.

A wheel that imports on the build machine but not on the board is the commonest failure of
today's tools: wrong machine (piwheels#207), soft-float objects in a hard-float userland
(dockcross#257), arm/v7 wheels tagged armv8l (maturin#1303), `GLIBC_2.29 not found` on the board
(piwheels#230). Each is checked here, for every ELF file in every artifact, with pyelftools.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from packaging.utils import parse_wheel_filename

from dockerarch import elf
from dockerarch.errors import DockerarchError
from dockerarch.targets import BoardTarget

# The libstdc++ symbol version each GCC major ships (GLIBCXX_3.4.N): a C++ extension built with a
# newer g++ than the board's fails to load there.
GCC_GLIBCXX = {8: (3, 4, 25), 9: (3, 4, 28), 10: (3, 4, 28), 11: (3, 4, 29), 12: (3, 4, 30),
               13: (3, 4, 32), 14: (3, 4, 33)}  # fmt: skip
_WHEEL_NAME = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)


class VerificationError(DockerarchError):
    """An artifact would not run on the target."""

    exit_code = 7


@dataclass(frozen=True, kw_only=True)
class ArtifactReport:
    name: str
    sha256: str
    size: int
    kind: str  # wheel, deb, tarball, file
    elf_files: int
    glibc: str | None  # highest GLIBC_ version needed
    glibcxx: str | None
    top_level: tuple[str, ...] = field(default=())  # a wheel's importable top-level names
    elf_members: tuple[str, ...] = field(default=())  # the archive's ELF files, by member name

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "sha256": self.sha256, "size": self.size, "kind": self.kind,
            "elf_files": self.elf_files, "needs_glibc": self.glibc, "needs_glibcxx": self.glibcxx,
        }  # fmt: skip


def _fail(artifact: str, member: str | None, problem: str, fix: str) -> VerificationError:
    where = f"{artifact}: {member}" if member else artifact
    return VerificationError(f"{where} {problem}", fix=fix)


def check_elf(facts: elf.ElfFacts, target: BoardTarget, artifact: str, member: str) -> None:
    arch = target.arch
    if facts.arch != arch.name:
        raise _fail(
            artifact, member,
            f"is {facts.arch or facts.machine} code, but target '{target.name}' is {arch.name}",
            f"Build it for the target's arch (--arch {arch.name}); an artifact built on another "
            "machine cannot run on this board.",
        )  # fmt: skip
    if arch.name == "armv7" and not facts.hard_float:
        raise _fail(
            artifact, member,
            "uses the soft-float ABI; the target's userland is hard-float (armhf)",
            "Build with the target's compiler flags (-mfloat-abi=hard), as the recipes do.",
        )  # fmt: skip
    limits = {"GLIBC": _version(target.glibc)}
    if target.gcc in GCC_GLIBCXX:
        limits["GLIBCXX"] = GCC_GLIBCXX[target.gcc]
    for library, limit in limits.items():
        needed = facts.highest(library)
        if needed is not None and needed > limit:
            raise _fail(
                artifact, member,
                f"needs {library}_{elf.version_text(needed)}, but target '{target.name}' ships "
                f"{library}_{elf.version_text(limit)} at most",
                "Build on a base as old as the board's userland (the target's suite), or raise "
                f"the target's {'glibc' if library == 'GLIBC' else 'gcc'} if the board has it.",
            )  # fmt: skip


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def _elf_members(
    archive: str, members: Iterator[tuple[str, IO[bytes]]]
) -> Iterator[tuple[str, elf.ElfFacts]]:
    for name, handle in members:
        head = handle.read(4)
        if not elf.is_elf(head):
            continue
        data = io.BytesIO(head + handle.read())
        try:
            yield name, elf.read_facts(data)
        except ValueError as exc:
            raise _fail(archive, name, f"is a damaged ELF file: {exc}", "Rebuild it.") from exc


def _zip_members(path: Path) -> Iterator[tuple[str, IO[bytes]]]:
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if not info.is_dir():
                with archive.open(info) as handle:
                    yield info.filename, handle


def _tar_members(source: Path | IO[bytes]) -> Iterator[tuple[str, IO[bytes]]]:
    opened = tarfile.open(name=source) if isinstance(source, Path) else tarfile.open(fileobj=source)
    with opened as archive:
        for member in archive:
            if member.isfile():
                handle = archive.extractfile(member)
                if handle is not None:
                    yield member.name, handle


def _deb_members(path: Path) -> Iterator[tuple[str, IO[bytes]]]:
    """The files of a .deb's data archive (an ar archive: a format of three fields, read with
    the stdlib; the data member is a tar that tarfile opens)."""
    with path.open("rb") as handle:
        if handle.read(8) != b"!<arch>\n":
            raise _fail(path.name, None, "is not a Debian package (no ar header)", "Rebuild it.")
        while header := handle.read(60):
            name = header[:16].decode().strip().rstrip("/")
            size = int(header[48:58].decode().strip())
            data = handle.read(size)
            if size % 2:
                handle.read(1)
            if name.startswith("data.tar"):
                yield from _tar_members(io.BytesIO(data))
                return
    raise _fail(path.name, None, "has no data.tar member", "Rebuild it.")


def wheel_tags(path: Path) -> tuple[str, str, str]:
    """(python, abi, platform) tags from a wheel's file name."""
    found = _WHEEL_NAME.match(path.name)
    if not found:
        raise _fail(path.name, None, "is not a well-formed wheel file name",
                    "Wheels are named NAME-VERSION-PYTHON-ABI-PLATFORM.whl.")  # fmt: skip
    return found.group("python"), found.group("abi"), found.group("platform")


def _file_members(path: Path) -> Iterator[tuple[str, IO[bytes]]]:
    with path.open("rb") as handle:
        yield path.name, handle


def _check_wheel_tag(path: Path, target: BoardTarget, fetched: bool) -> str:
    from dockerarch.pyenv import MACHINE, platforms

    _, _, platform = wheel_tags(path)
    # A wheel fits when one of its tags does: dockerarch's own builds are linux_<machine> (never
    # claimed manylinux: nothing audited them for it); a wheel fetched from an index may carry a
    # manylinux tag the target's glibc accepts (its ELF files are checked all the same).
    fits = {"any", target.arch.wheel_tag}
    if fetched:
        fits |= set(platforms(MACHINE[target.arch.name], target.glibc))
    tags = platform.split(".")
    for tag in [] if fits.intersection(tags) else tags:
        if tag not in fits:
            hint = (
                " (armv8l is what arm/v7 wheels built on an arm64 kernel get)"
                if "armv8l" in tag
                else ""
            )
            raise _fail(
                path.name, None,
                f"is tagged {tag}, but target '{target.name}' needs {target.arch.wheel_tag}{hint}",
                "Build it under the target's platform (dockerarch does); never rename a wheel.",
            )  # fmt: skip
    return platform


def verify_all(
    directory: Path, target: BoardTarget, *, what: str, recipe: str, skip: tuple[str, ...] = ()
) -> list[ArtifactReport]:
    """Verify every file a build exported into ``directory`` (but ``skip``): a build's outputs
    are files, and there is at least one. ``what`` names the build for the user."""
    reports = []
    for path in sorted(directory.iterdir()):
        if path.name in skip:
            continue
        if path.is_dir():
            raise VerificationError(
                f"The artifacts stage of recipe '{recipe}' exported a directory ({path.name})",
                fix="Recipes put files directly in /out.",
            )
        reports.append(verify(path, target))
    if not reports:
        raise VerificationError(
            f"The build of {what} produced no artifacts",
            fix="The recipe's build must write its outputs to /out.",
        )
    return reports


def verify(path: Path, target: BoardTarget, *, fetched: bool = False) -> ArtifactReport:
    """Check one artifact against the target; raise VerificationError naming file and symbol."""
    glibc: tuple[int, ...] | None = None
    glibcxx: tuple[int, ...] | None = None
    count = 0
    elf_names: list[str] = []
    top_level: tuple[str, ...] = ()
    platform = None
    try:
        if path.suffix == ".whl":
            kind, members = "wheel", _zip_members(path)
            platform = _check_wheel_tag(path, target, fetched)
            top_level = _top_level(path)
        elif path.name.endswith((".tar.gz", ".tgz", ".tar.xz", ".tar")):
            kind, members = "tarball", _tar_members(path)
        elif path.suffix == ".deb":
            kind, members = "deb", _deb_members(path)
        else:
            kind, members = "file", _file_members(path)
        for member, facts in _elf_members(path.name, members):
            check_elf(facts, target, path.name, member)
            count += 1
            elf_names.append(member)
            glibc = max(filter(None, (glibc, facts.highest("GLIBC"))), default=None)
            glibcxx = max(filter(None, (glibcxx, facts.highest("GLIBCXX"))), default=None)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, ValueError) as exc:
        raise _fail(path.name, None, f"is a damaged archive: {exc}", "Rebuild it.") from exc
    if count and platform == "any":
        raise _fail(path.name, None, f"holds {count} compiled files but is tagged 'any'",
                    "Its build must tag it for the platform (a bdist_wheel setting).")  # fmt: skip
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return ArtifactReport(
        name=path.name, sha256=digest, size=path.stat().st_size, kind=kind, elf_files=count,
        glibc=elf.version_text(glibc) if glibc else None,
        glibcxx=elf.version_text(glibcxx) if glibcxx else None, top_level=top_level,
        elf_members=tuple(elf_names),
    )  # fmt: skip


def _top_level(path: Path) -> tuple[str, ...]:
    """Importable top-level names of a wheel: top_level.txt when present, else its RECORD."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        listed = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        if listed:
            text = archive.read(listed[0]).decode()
            return tuple(sorted({line.strip() for line in text.splitlines() if line.strip()}))
    found = set()
    for name in names:
        first, slash, _ = name.partition("/")
        if slash:  # a package's directory (not numpy.libs, name.dist-info or name.data)
            module = first if first.isidentifier() else ""
        elif first.endswith((".py", ".so", ".pyd")):  # mod.py, _mod.cpython-311-*.so
            module = first.split(".", 1)[0]
        else:  # any other file at the top: data, not importable
            module = ""
        if module.isidentifier():
            found.add(module)
    return tuple(sorted(found))


def board_gate(path: Path, target: BoardTarget, *, fetched: bool = False) -> ArtifactReport:
    """The board-ABI gate for a wheel file of ``target``, built by dockerarch or ``fetched`` from
    an index (a manylinux tag the target's glibc accepts is fine then): the verification every
    artifact passes (machine, float ABI, tag, GLIBC/GLIBCXX) and the target's Python version, as
    its index and a wheel set take a wheel; its report."""
    report = verify(path, target, fetched=fetched)
    _, _, _, tags = parse_wheel_filename(path.name)
    major, minor = (int(p) for p in target.python.split("."))
    ok = False
    for tag in tags:
        if tag.interpreter in (f"cp{major}{minor}", f"py{major}", f"py{major}{minor}"):
            ok = True
        elif tag.abi == "abi3" and tag.interpreter.startswith("cp3"):
            ok = ok or int(tag.interpreter[3:] or 0) <= minor
    if not ok:
        interpreters = ", ".join(sorted({t.interpreter for t in tags}))
        raise VerificationError(
            f"{path.name} is for {interpreters}, but target '{target.name}' runs Python "
            f"{target.python}: pip on its boards would refuse it (or worse, a wheel for another "
            "OS release would slip into its index)",
            fix=f"Build it for that target (dockerarch build ... --target {target.name}), and "
            "publish each target's wheels to its own index.",
        )
    return report
