"""`--source PATH`: a recipe's upstream source from this machine instead of a git clone.

A checkout (submodules included) or a source archive (.tar.gz, .tar.xz, .tar.bz2, .tgz, .zip,
such as a release tarball that carries its submodules) reaches the build as the BuildKit named
build context ``source``, so the build needs no network for it. An archive is unpacked beside
the build's other temporary files (one top-level folder, as release tarballs have, is stepped
into), refusing members that would land outside. Before anything is built the source must exist
and hold what the recipe needs at its root (``source_markers`` in recipe.yaml: any one of them).
What was used goes into manifest.json: the path and git commit of a checkout, or the archive's
sha256.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from dockerarch import process
from dockerarch.errors import UsageError
from dockerarch.files import context_name, sha256_file
from dockerarch.recipes import Recipe

ARCHIVES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tar", ".zip")


@dataclass(frozen=True, kw_only=True)
class LocalSource:
    path: Path
    archive: bool
    sha256: str | None = None  # an archive's
    commit: str | None = None  # a git checkout's HEAD
    top: str = ""  # an archive's single top-level folder, stepped into

    def record(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": str(self.path),
            "kind": "archive" if self.archive else "directory",
        }
        if self.sha256:
            data["sha256"] = self.sha256
        if self.commit:
            data["commit"] = self.commit
        return data


def _archive_names(path: Path) -> list[str]:
    """The archive's member names, normalised (``./a/b`` is ``a/b``), once every member is known
    to land inside the tree: no absolute path, no ``..``, no link pointing out, no device."""
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                raw = archive.namelist()
                for name in raw:
                    pure = PurePosixPath(name)
                    if pure.is_absolute() or ".." in pure.parts:
                        _outside(path, name, "its path leaves the tree")
        else:
            with tarfile.open(path) as archive:
                members = archive.getmembers()
                for member in members:
                    if PurePosixPath(member.name).is_absolute():
                        _outside(path, member.name, "an absolute path")
                    try:  # the checks extraction applies (filter="data"), before any work
                        tarfile.data_filter(member, _CHECK_ROOT)
                    except tarfile.FilterError as exc:
                        _outside(path, member.name, str(exc))
                raw = [m.name for m in members]
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise UsageError(f"--source {path} is not a readable archive: {exc}",
                         fix="Give a .tar.gz, .tar.xz or .zip of the source, or a directory.") from exc  # fmt: skip
    return [str(PurePosixPath(n)) for n in raw if PurePosixPath(n).parts]


_CHECK_ROOT = "/dockerarch-source-check"  # a destination that need not exist, for data_filter


def _outside(path: Path, name: str, why: str) -> None:
    raise UsageError(
        f"--source {path} has a member that would land outside the source tree: {name} ({why})",
        fix="Use the project's own release archive or a checkout; dockerarch unpacks nothing "
        "from an archive that reaches outside its root.",
    )


def _git_commit(path: Path) -> str | None:
    if not (path / ".git").exists() or shutil.which("git") is None:
        return None
    done = process.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=False)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def check_source(text: str, recipe: Recipe) -> LocalSource:
    """Validate ``--source`` for ``recipe`` before anything is built."""
    if not recipe.source_markers:
        raise UsageError(
            f"Recipe '{recipe.name}' does not take --source: its source is not a git repository",
            fix="--source is for qpulib, vaccel, torch, torchvision and glow (recipes built from a "
            "source tree).",
        )
    path = Path(text).expanduser().absolute()
    wanted = " or ".join(recipe.source_markers)
    if not path.exists():
        raise UsageError(f"--source {path} does not exist",
                         fix=f"Give the recipe's source tree (holding {wanted}) or its archive.")  # fmt: skip
    if path.is_dir():
        if not any((path / m).exists() for m in recipe.source_markers):
            raise UsageError(
                f"--source {path} holds no {wanted} at its root: not {recipe.name}'s source tree",
                fix="Point it at the top of the checkout (with its submodules) or the release archive.",
            )
        return LocalSource(path=path, archive=False, commit=_git_commit(path))
    if not path.name.endswith(ARCHIVES):
        raise UsageError(f"--source {path} is neither a directory nor an archive ({', '.join(ARCHIVES)})",
                         fix="Give a checkout or a source archive.")  # fmt: skip
    names = _archive_names(path)
    tops = {n.split("/", 1)[0] for n in names if n}
    top = next(iter(tops)) if len(tops) == 1 and any("/" in n for n in names) else ""
    inside = {n[len(top) + 1 :] if top else n for n in names}
    if not any(m in inside or m + "/" in inside or any(i.startswith(m + "/") for i in inside)
               for m in recipe.source_markers):  # fmt: skip
        raise UsageError(
            f"--source {path} holds no {wanted} at its root"
            + (f" (below its folder {top}/)" if top else ""),
            fix=f"Give an archive of {recipe.name}'s source tree.",
        )
    return LocalSource(path=path, archive=True, sha256=sha256_file(path), top=top)


def context_dir(source: LocalSource, work: Path) -> Path:
    """The directory to hand BuildKit as the named context ``source``."""
    if not source.archive:
        return source.path
    dest = work / context_name("source", work)  # a context of its own name (files.context_name)
    dest.mkdir()
    if source.path.name.endswith(".zip"):
        with zipfile.ZipFile(source.path) as archive:
            for member in archive.infolist():
                name = PurePosixPath(member.filename)
                if name.is_absolute() or ".." in name.parts:
                    raise UsageError(f"--source {source.path} has a member outside its root: {member.filename}",
                                     fix="Use an archive you trust.")  # fmt: skip
            archive.extractall(dest)
    else:
        with tarfile.open(source.path) as archive:
            try:
                archive.extractall(dest, filter="data")  # refuses absolute paths, .., links out
            except tarfile.FilterError as exc:
                raise UsageError(
                    f"--source {source.path}: {exc}", fix="Use an archive you trust."
                ) from exc
    return dest / source.top if source.top else dest
