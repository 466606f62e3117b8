"""A wheel set while it is made: its members (one distribution each and what became of it), one
target's set, and where a set's files land below OUT.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dockerarch.artifacts import ArtifactReport
from dockerarch.errors import DockerarchError
from dockerarch.render import RenderRequest
from dockerarch.sets.closure import Resolved
from dockerarch.sets.indexes import Indexes

Say = Callable[[str], None]
WHEELS = "wheels"  # OUT/<target>/wheels: the wheels fetched for the target
SETS = "sets"  # OUT/<target>/sets/<name>: the sets
DOWNLOADS = ".downloads"  # OUT/.downloads: index files by sha256 (the same for every target)


class SetBuildFailed(DockerarchError):
    """A package of the set could not be built; what could was kept."""

    exit_code = 6
    tail: tuple[str, ...] = ()  # the failed step's last lines
    log: Path | None = None  # its build log


@dataclass(kw_only=True)
class Member:
    """One distribution of a target's set and what became of it."""

    node: Resolved
    path: Path | None = None  # the wheel, once fetched or built
    report: ArtifactReport | None = None
    result: Path | None = None  # a built one's result directory
    record: dict[str, object] | None = None  # a built one's manifest.json
    reused: bool = False
    error: DockerarchError | None = None
    asked: list[str] = field(default_factory=list)  # build requirements its build asked for itself
    fixed: list[str] = field(
        default_factory=list
    )  # dockerarch's known fixes to its sdist (sdistfix)

    @property
    def key(self) -> str:
        return self.node.key

    @property
    def built(self) -> bool:
        return not self.node.candidate.is_wheel


@dataclass(kw_only=True)
class TargetSet:
    """One target's set while it is made."""

    request: RenderRequest  # the wheel recipe for this target (no package)
    indexes: Indexes  # one for every target of a run: each project page is read once
    members: dict[str, Member] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # the build order of the built members
    directory: Path | None = None  # the written set
    check: str | None = None  # what the installed set's import printed
    tests: str | None = None  # what the user's tests printed last
    image: dict[str, str] | None = None  # the set installed and checked: tag, id, engine
    started: float = field(default_factory=time.monotonic)
    needs_apt: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: DockerarchError | None = None  # the installed check or the user's tests failed
    build_names: frozenset[str] = frozenset()  # taken from their sdists (SetRequest.build_names)
    no_deps: bool = False

    @property
    def target(self) -> str:
        return self.request.target.name


def needed_by(member: Member) -> str:
    asked = sorted(member.node.needed_by)
    return ", ".join(asked) if asked else "the requirements"
