"""What a wheel set's resolution says when the requirements cannot be met for a target."""

from __future__ import annotations

from dockerarch.errors import DockerarchError


class ResolutionError(DockerarchError):
    """The requirements cannot be met for the target from the indexes."""

    exit_code = 9
