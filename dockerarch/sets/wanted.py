"""What the user asked for (requirements files, packages, options) as one set request per
target, the set's name, and the sets an earlier run wrote for it.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement

from dockerarch.errors import UsageError
from dockerarch.pyreqs import Wants
from dockerarch.recipes import directory_named
from dockerarch.render import RenderRequest
from dockerarch.sets.model import SETS
from dockerarch.targets import BoardTarget


def set_name(requirement_files: list[Path], packages: list[str]) -> str:
    """The set's directory name: the first requirements file's name, else the first package's."""
    if requirement_files:
        stem = requirement_files[0].name
        stem = stem[: -len(".txt")] if stem.endswith(".txt") else stem
    elif (directory := directory_named(packages[0])) is not None:  # a project's: its name
        stem = directory.resolve().name
    else:
        stem = re.split(r"[\[<>=!~; ]", packages[0], maxsplit=1)[0]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip(".-") or "set"


@dataclass(frozen=True, kw_only=True)
class SetRequest:
    """What `build wheel -r` was asked, as given on the command line."""

    requirement_files: list[Path]
    constraint_files: list[Path] = field(default_factory=list)
    build_constraint_files: list[Path] = field(default_factory=list)  # pins for builds only
    packages: list[str] = field(default_factory=list)  # --package specs beside the files
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    require_hashes: bool = False
    no_binary: list[str] = field(default_factory=list)  # --no-binary values, as pip takes them
    find_links: list[str] = field(default_factory=list)  # --find-links directories
    no_deps: bool = False
    name: str | None = None
    test_requires: list[str] = field(default_factory=list)  # installed beside the set for --test
    test_command: str | None = None  # run in the set's image, {project}: test_sources
    test_sources: Path | None = None  # default: the current directory

    @functools.cached_property
    def wants(self) -> Wants:
        """The files read (once), as pip reads them."""
        from dockerarch.pyreqs import read_wants

        return read_wants(self.requirement_files, self.constraint_files, self.packages,
                          index_url=self.index_url, extra_index_urls=self.extra_index_urls,
                          require_hashes=self.require_hashes, no_binary=self.no_binary,
                          find_links=self.find_links,
                          build_constraint_files=self.build_constraint_files)  # fmt: skip

    @property
    def build_names(self) -> frozenset[str]:
        """--package and --no-binary names are built from their sdists (pyreqs.ALL: every package
        of the set); so is everything with --no-deps."""
        wants = self.wants
        named = [w.name for w in wants.requirements if w.where == "--package"]
        if self.no_deps:
            named = [w.name for w in wants.requirements]
        return frozenset(named) | wants.no_binary

    @property
    def set_name(self) -> str:
        return self.name or set_name(self.requirement_files, self.packages)

    @property
    def tests(self) -> tuple[Requirement, ...]:
        """--test-requires as requirements (checked as a requirements file's lines are)."""
        from dockerarch.pyreqs import parse_line

        return tuple(parse_line(t, "--test-requires").requirement for t in self.test_requires)


def set_requests(recipe: str, wanted: SetRequest, *, arch: str | None, target: str | None,
                 settings: dict[str, str]) -> list[RenderRequest]:  # fmt: skip
    """The wheel recipe's request for each target (options checked), before anything runs."""
    from dockerarch.render import plan as plan_requests

    if recipe != "wheel":
        raise UsageError(f"-r builds a set of wheels; recipe '{recipe}' does not take it",
                         fix="Use dockerarch build wheel -r FILE.")  # fmt: skip
    if wanted.name is not None and set_name([], [wanted.name]) != wanted.name:
        raise UsageError(f"--name {wanted.name!r} is not a directory name dockerarch writes",
                         fix="Use letters, digits, '.', '_' and '-'.")  # fmt: skip
    first = wanted.packages[0] if wanted.packages else wanted.wants.requirements[0].requirement.name
    return plan_requests("wheel", arch=arch, target=target, version=None, package=first,
                         settings=settings)  # fmt: skip


def sets_of(requests: list[RenderRequest], wanted: SetRequest, out: Path) -> list[tuple[BoardTarget, Path]]:  # fmt: skip
    """Each target's set directory, as build wheel -r with the same files and --name wrote it,
    made from what those files ask now: a set built before they changed is refused (upload would
    publish what they no longer ask for)."""
    found = [(r.target, out / r.target.name / SETS / wanted.set_name) for r in requests]
    wants = wanted.wants

    now = {key: sorted(str(w.requirement) for w in lines) for key, lines in (
        ("requirements", wants.requirements), ("constraints", wants.constraints),
        ("build_constraints", wants.build_constraints))}  # fmt: skip
    for target, directory in found:
        try:
            manifest = json.loads((directory / "manifest.json").read_text())
        except (OSError, ValueError):
            continue  # no set there: said by whoever reads its wheels
        # the manifest writes "REQUIREMENT (FILE:LINE)": where a line stood may move
        then = {key: sorted(str(line).rsplit(" (", 1)[0] for line in manifest.get(key) or [])
                for key in now}  # fmt: skip
        if then != now:
            changed = sorted(
                {f"+{x}" for k in now for x in now[k] if x not in then[k]}
                | {f"-{x}" for k in now for x in then[k] if x not in now[k]}
            )
            raise UsageError(
                f"The set {directory} for {target.name} was built from other requirements than "
                f"the files now ask ({', '.join(changed[:6]) or 'their order'}"
                f"{', ...' if len(changed) > 6 else ''})",
                fix="Build the set again from the files as they are (dockerarch build wheel -r "
                "...), then upload it; or upload the set as it was built with the files it was "
                "built from.",
            )
    return found
