"""Writing results without ever leaving a half-written file where a good one was."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from dockerarch.errors import DockerarchError


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it into place."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise DockerarchError(
            f"Cannot write {path}: the directory {directory} does not exist",
            fix="Create it first, or choose another path.",
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
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
