"""Writing results without ever leaving a half-written file where a good one was."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dockerarch.errors import OutputError


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it into place."""
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OutputError(
            f"Cannot write {path}: it is a directory",
            fix=f"Name a file, e.g. {path / 'Dockerfile'}.",
        )
    if not directory.is_dir():
        raise OutputError(
            f"Cannot write {path}: the directory {directory} does not exist",
            fix="Create it first, or choose another path.",
        )
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(
            f"Cannot write {path}: {exc.strerror or exc} in {directory}",
            fix="Choose a path in a directory you can write to.",
        ) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path) -> str:
    """The sha256 of a file's contents, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def inside(base: Path, *parts: str) -> Path:
    """``base / parts...``, each part one plain name (no separator, not ``.`` or ``..``) and the
    whole resolving below ``base``: a name read from a package (its version, its file name) can
    never make dockerarch write or replace anything outside ``base``."""
    path = base
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\\" in part or "\0" in part:
            raise OutputError(
                f"Refusing to write {part!r} below {base}: it is not one plain file name",
                fix="The name came from a package's own metadata (its name or version): the "
                "package is broken or hostile; build another version.",
            )
        path = path / part
    if not path.resolve().is_relative_to(base.resolve()):
        raise OutputError(
            f"Refusing to write {path}: it resolves outside {base} (a symbolic link on the way)",
            fix=f"Remove the link below {base}, or choose another output directory.",
        )
    return path


def replace_dir(
    new: Path, final: Path, *, remove: Callable[[Path], object] = shutil.rmtree
) -> None:
    """Put the directory ``new`` at ``final``; an earlier one is moved aside first and removed
    (with ``remove``) only once the new one is in place."""
    old = None
    if os.path.lexists(final):
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        os.rename(final, old)
    try:
        os.rename(new, final)
    except BaseException:
        if old is not None:
            os.rename(old, final)
        raise
    if old is not None:
        remove(old)


OWNER = "owner.pid"  # in a work directory: the process that made it
_UNCLAIMED_GRACE = 60.0  # seconds a work directory may exist before its owner writes OWNER


def context_name(name: str, owner: Path) -> str:
    """The name of a build context directory dockerarch writes for one build (``owner``: that
    build's own temporary directory), unique to it. buildx sends a local context incrementally:
    into what it kept of the last context with the same directory name, sending only the files
    whose path, size or mtime differ (docker/buildx#3232). dockerarch's contexts hold files of the
    same names, sizes and mtimes from build to build (an sdist's fixed mtimes, wheels stamped with
    SOURCE_DATE_EPOCH: two versions' pyproject.toml of equal length), so a fixed name ("context")
    let a build compile another build's file. A name of its own makes each transfer whole."""
    import hashlib

    return f"{name}-{hashlib.sha256(str(owner.resolve()).encode()).hexdigest()[:12]}"


def link_or_copy(source: Path, destination: Path) -> None:
    """``destination`` becomes ``source``'s file: a hard link where both are on one filesystem,
    else a copy; made beside it and renamed into place."""
    partial = destination.with_name(f".{destination.name}.{os.getpid()}.part")
    partial.unlink(missing_ok=True)
    try:
        os.link(source, partial)
    except OSError:
        shutil.copy2(source, partial)
    os.replace(partial, destination)


def linked_view(source: Path, destination: Path) -> Path:
    """``source``'s tree at ``destination`` (a new directory): its files hard-linked (copied
    across filesystems), its symbolic links as they are. A build context made of another result's
    directory goes to buildx through such a view named by context_name: the result keeps its own
    name from build to build, and buildx would send a rebuilt file of the same size and mtime
    into it as unchanged."""
    destination.mkdir()
    for root, dirs, names in os.walk(source):
        here = destination / Path(root).relative_to(source)
        for name in dirs:
            if (Path(root) / name).is_symlink():
                os.symlink(os.readlink(Path(root) / name), here / name)
            else:
                (here / name).mkdir()
        for name in names:
            path = Path(root) / name
            if path.is_symlink():
                os.symlink(os.readlink(path), here / name)
            else:
                link_or_copy(path, here / name)
    return destination


def make_work_dir(parent: Path, name: str) -> Path:
    """A temporary directory ``.NAME.XXXXXXXX.tmp`` in ``parent``, claimed by this process (see
    ``abandoned_work_dirs``)."""
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent))
    (work / OWNER).write_text(f"{os.getpid()}\n")
    return work


def abandoned_work_dirs(parent: Path, name: str) -> list[Path]:
    """The work directories of ``name`` in ``parent`` whose process is gone: a command killed
    with SIGKILL (or a lost machine) cannot clean up after itself. One whose process still runs
    (another terminal building the same thing) is left alone."""
    pattern = re.compile(rf"^\.{re.escape(name)}\.[A-Za-z0-9_]{{8}}\.tmp$")
    found = []
    for path in sorted(parent.iterdir()) if parent.is_dir() else []:
        if not pattern.match(path.name) or path.is_symlink() or not path.is_dir():
            continue
        try:
            pid = int((path / OWNER).read_text().strip())
        except (OSError, ValueError):
            if time.time() - path.stat().st_mtime > _UNCLAIMED_GRACE:
                found.append(path)
            continue
        if not _alive(pid):
            found.append(path)
    return found


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ensure_writable_dir(directory: Path, what: str) -> None:
    """Check, before any work, that ``directory`` can be made (if missing) and written to;
    ``what`` names it for the user (``--out``, ``DEST's directory``). Nothing is created: a
    build that fails leaves no empty output directory behind."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        shown = directory if existing == directory else f"{directory} ({existing})"
        raise OutputError(f"{what} {shown} is a file, not a directory", fix="Choose a directory.")
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        raise OutputError(
            f"Cannot write into {what} {directory}: {exc.strerror or exc} in {existing}",
            fix="Choose a directory you can write to.",
        ) from exc
