"""A board target as Python packaging sees it: the environment markers its interpreter reports
and the wheel tags its pip accepts. Computed from the target's definition (arch, Python version,
glibc), never from this machine, so a set is resolved for the board, not for the x86 host.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

from dockerarch.targets import BoardTarget

# What `platform.machine()` answers on each arch's boards (uname -m), and so wheels' tags use.
MACHINE = {"armv7": "armv7l", "aarch64": "aarch64", "amd64": "x86_64"}


@dataclass(frozen=True)
class PythonTarget:
    """Markers and tags of one board target's Python."""

    markers: dict[str, str]
    tags: tuple[Tag, ...]  # best first, as pip ranks them
    python: tuple[int, int]

    def tag_rank(self, filename: str) -> int | None:
        """The rank of a wheel for this target (0 best), None when its pip would refuse it."""
        try:
            _, _, _, tags = parse_wheel_filename(filename)
        except ValueError:
            return None
        ranks = [self._ranks[t] for t in tags if t in self._ranks]
        return min(ranks) if ranks else None

    @functools.cached_property
    def _ranks(self) -> dict[Tag, int]:
        return {tag: i for i, tag in enumerate(self.tags)}


# The legacy names of manylinux_2_N (PEP 600), as pip's packaging lists them after each.
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platforms(machine: str, glibc: str) -> list[str]:
    """The platform tags a glibc of this version accepts, newest first, as pip's packaging
    gives them: manylinux_2_N down to 2_17 (2_5 on x86-64 and i686, where manylinux began), each
    legacy alias after its version (manylinux2014, manylinux2010, manylinux1), then the plain
    linux_<machine> that indexes of built wheels (piwheels, dockerarch upload) serve, which the
    board-ABI gate checks after download."""
    major, minor = (int(p) for p in glibc.split("."))
    oldest = 5 if machine in ("x86_64", "i686") else 17
    tags = []
    for m in range(minor, oldest - 1, -1):
        tags.append(f"manylinux_{major}_{m}_{machine}")
        if m in _LEGACY_MANYLINUX:
            tags.append(f"{_LEGACY_MANYLINUX[m]}_{machine}")
    return [*tags, f"linux_{machine}"]


def python_target(target: BoardTarget, machine: str | None = None) -> PythonTarget:
    """The target's Python; with ``machine`` (x86_64), the same Python version and C library on
    that machine (the hybrid build's native Python)."""
    major, minor = (int(p) for p in target.python.split("."))
    machine = machine or MACHINE[target.arch.name]
    plats = platforms(machine, target.glibc)
    tags = [*cpython_tags((major, minor), platforms=plats),
            *compatible_tags((major, minor), interpreter=f"cp{major}{minor}", platforms=plats)]  # fmt: skip
    version = f"{major}.{minor}"
    markers = {
        "implementation_name": "cpython",
        "implementation_version": target.python_full_version,
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": target.python_full_version,
        "python_version": version,
        "sys_platform": "linux",
    }
    return PythonTarget(markers=markers, tags=tuple(dict.fromkeys(tags)), python=(major, minor))
