"""Writing results without ever leaving a half-written file where a good one was."""

from __future__ import annotations

import os
import tempfile
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
