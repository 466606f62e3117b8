"""A project on this machine as a wheel set's member: a requirements line that is a directory
(``./my_ext``, as pip takes it), packed into an sdist the set treats like one from an index.

The sdist is the tree as it is now, byte for byte, less what a build leaves or a checkout keeps
beside the sources (``.git``, ``__pycache__``, ``*.egg-info``, a top-level ``build/`` and
``dist/``, virtual environments): setuptools would otherwise take a stale ``build/``'s objects.
Its bytes depend on the files' names, modes and contents only (sorted, one fixed time, no owner),
so an unchanged tree is the same sdist again and the set reuses its earlier build; a changed file
is a new sdist, built again.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path

from dockerarch.errors import UsageError
from dockerarch.files import write_atomic
from dockerarch.recipes import PackageSpec, directory_named, local_package

# Left out anywhere in the tree, and at its top only (a package may have a module dir "build").
SKIP_ANYWHERE = frozenset({".git", ".hg", ".svn", "__pycache__", ".tox", ".nox", ".venv",
                           ".mypy_cache", ".pytest_cache", ".ruff_cache"})  # fmt: skip
SKIP_AT_TOP = frozenset({"build", "dist", "venv", "wheelhouse"})
SKIP_SUFFIXES = (".egg-info", ".pyc", ".pyo")
MTIME = 315532800  # 1980-01-01: the earliest time a wheel's zip entries can hold


def _kept(relative: Path) -> bool:
    if any(part in SKIP_ANYWHERE or part.endswith(SKIP_SUFFIXES) for part in relative.parts):
        return False
    return not (len(relative.parts) >= 1 and relative.parts[0] in SKIP_AT_TOP)


def _files(tree: Path) -> list[Path]:
    """Every kept path under ``tree``, relative, sorted (directories before their contents)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(tree, followlinks=False):
        base = Path(root).relative_to(tree)
        dirs[:] = sorted(d for d in dirs if _kept(base / d))
        found.extend(base / d for d in dirs)
        found.extend(base / f for f in sorted(files) if _kept(base / f))
    return sorted(found, key=lambda p: p.parts)


def pack(tree: Path, into: Path) -> tuple[PackageSpec, Path]:
    """``tree`` as ``NAME-VERSION.tar.gz`` (its one directory NAME-VERSION/) in ``into``; the
    project's name and version are its static ones (recipes.local_package)."""
    spec = local_package(tree)
    top = f"{spec.dist_name}-{spec.version}"
    buffer = io.BytesIO()
    # gzip with no name and no time in its header: the same tree gives the same bytes
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for relative in _files(tree):
                path = tree / relative
                info = archive.gettarinfo(str(path), arcname=f"{top}/{relative.as_posix()}")
                if not (info.isfile() or info.isdir() or info.issym()):
                    continue  # sockets, fifos, devices: nothing a build reads
                info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "", ""
                info.mode = 0o755 if info.isdir() or stat.S_IMODE(info.mode) & 0o111 else 0o644
                if info.isfile():
                    with path.open("rb") as contents:
                        archive.addfile(info, contents)
                else:
                    archive.addfile(info)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    path = into / digest[:2] / digest / f"{top}.tar.gz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    return spec, path


def local_spec(text: str) -> Path | None:
    """The directory a requirements line names (recipes.directory_named), resolved, or None when
    it names no path (a PyPI name); relative to the current directory, as pip takes it."""
    path = directory_named(text)
    if path is None:
        return None
    if not path.is_dir():
        raise UsageError(f"{text}: no such directory",
                         fix="Give the directory of a Python project (its pyproject.toml or setup.py).")  # fmt: skip
    return path.resolve()
