"""A target's set resolved (closure.resolve) into members with their build order, and the members
that have a wheel for the board fetched, hash-checked and put through the board-ABI gate.
"""

from __future__ import annotations

import graphlib
from pathlib import Path

from packaging.requirements import Requirement

from dockerarch import artifacts
from dockerarch.artifacts import VerificationError
from dockerarch.errors import UsageError
from dockerarch.files import link_or_copy, sha256_file
from dockerarch.pyenv import python_target
from dockerarch.pyreqs import Wants
from dockerarch.render import RenderRequest
from dockerarch.sets import closure
from dockerarch.sets.errors import ResolutionError
from dockerarch.sets.indexes import Indexes
from dockerarch.sets.model import WHEELS, Member, Say, TargetSet, needed_by


def plan(request: RenderRequest, wants: Wants, indexes: Indexes, *, build_names: frozenset[str],
         no_deps: bool, say: Say, tests: tuple[Requirement, ...] = ()) -> TargetSet:  # fmt: skip
    """The target's set resolved, with its build order. ``build_names`` are built from their
    sdists even where the index has a wheel (what --package names); with ``no_deps`` nothing else
    may need a build."""
    target = python_target(request.target)
    found = closure.resolve(wants, target, indexes, say=say, build_names=build_names, tests=tests,
                            learn=True)  # fmt: skip
    made = TargetSet(request=request, indexes=indexes, build_names=build_names, no_deps=no_deps,
                     members={k: Member(node=n) for k, n in found.items()})  # fmt: skip
    built = [m for m in made.members.values() if m.built]
    if no_deps:
        others = [m for m in built if m.node.candidate.name not in build_names]
        if others:
            listed = "; ".join(f"{m.key} (needed by {needed_by(m)})" for m in others)
            raise UsageError(
                f"With --no-deps, dockerarch builds only {', '.join(sorted(build_names))} for "
                f"{request.target.name}, but these have no wheel for the board on the index and "
                f"would have to be built too: {listed}",
                fix="Drop --no-deps to build them in the set as well (each once for the target), "
                "or give an index that has wheels for the board (--extra-index-url).",
            )
    graph: dict[str, set[str]] = {}
    for member in built:
        before = set(member.node.build_env.values()) | member.node.requires
        graph[member.key] = {k for k in before if k in made.members and made.members[k].built}
    try:
        made.order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        cycle = " -> ".join(str(k) for k in exc.args[1])
        raise ResolutionError(
            f"The packages to build for {request.target.name} need each other to be built "
            f"first: {cycle}",
            fix="Give one of them a wheel (an index that has one, --extra-index-url) to break "
            "the circle.",
        ) from exc
    fetched = len(made.members) - len(built)
    say(f"set: {len(made.members)} distributions, {fetched} wheels to fetch, {len(built)} to "
        f"build" + (f" ({', '.join(made.order)})" if made.order else ""))  # fmt: skip
    editable = {w.name for w in wants.requirements if w.editable}
    for key in made.order:
        name = made.members[key].node.candidate.name
        tree = wants.directories.get(name)
        if tree is not None:
            say(f"set: {key} from the directory {tree}" + (
                " (-e: built as a regular wheel; an editable install points at this machine's "
                "tree, which the board does not have)" if name in editable else ""))  # fmt: skip
        if made.members[key].node.learn:
            say(f"set: {key}'s sdist does not say what it needs at run time (setup.py's "
                "install_requires, dynamic metadata): its wheel will, once built, and the set "
                "adds it")  # fmt: skip
    return made


def fetch(made: TargetSet, wants: Wants, out: Path, say: Say) -> None:
    """Every wheel the index has for the board, downloaded (hash-checked) into
    OUT/<target>/wheels and put through the board-ABI gate."""
    indexes = made.indexes
    pool = out / made.target / WHEELS
    pool.mkdir(parents=True, exist_ok=True)
    for member in made.members.values():
        if member.built or member.path is not None:
            continue
        file = member.node.candidate.file
        name = member.node.candidate.name
        allowed = wants.hashes_for(name) if member.node.runtime else wants.build_hashes_for(name)
        downloaded = indexes.download(file, allowed)
        path = pool / file.filename
        if not path.is_file() or sha256_file(path) != file.sha256:
            link_or_copy(downloaded, path)
        try:
            member.report = artifacts.board_gate(path, made.request.target, fetched=True)
        except VerificationError as exc:
            raise VerificationError(
                f"{file.filename} from the index, which {needed_by(member)} needs, fails the "
                f"board-ABI gate of {made.target}: {exc.problem}",
                fix="The index's wheel does not fit the board: pin another version, or have it "
                f"built from its sdist (--no-binary {member.node.candidate.name}).",
            ) from exc
        member.path = path
    count = sum(1 for m in made.members.values() if not m.built)
    if count:
        say(f"set: {count} wheels fetched and checked for {made.target}")
