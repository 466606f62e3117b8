"""The whole job: every target's set resolved, fetched, its members built in dependency order
(one at a time per target, the targets side by side), build requirements a build asked for on
its own and run-time requirements a wheel told added, then written and checked.
"""

from __future__ import annotations

import functools
import graphlib
import re
import shutil
import threading
import time
from pathlib import Path

from dockerarch.build import Feed, JobResult, Progress
from dockerarch.buildsteps import BuildOptions
from dockerarch.errors import DockerarchError, UsageError
from dockerarch.files import make_work_dir
from dockerarch.pyenv import python_target
from dockerarch.pyreqs import Wants
from dockerarch.render import RenderRequest
from dockerarch.sets import closure
from dockerarch.sets.check import check_installed
from dockerarch.sets.contexts import build_requests
from dockerarch.sets.indexes import Indexes
from dockerarch.sets.metadata import wheel_metadata
from dockerarch.sets.model import DOWNLOADS, Member, Say, TargetSet, needed_by
from dockerarch.sets.output import write_set
from dockerarch.sets.planning import fetch, plan
from dockerarch.sets.reuse import reuse, take
from dockerarch.sets.wanted import SetRequest


def make_sets(
    requests: list[RenderRequest], wanted: SetRequest, options: BuildOptions, progress: Progress
) -> list[TargetSet]:
    """Every target's set: resolved (all targets before anything is fetched or built), fetched,
    built in dependency order (one package per target at a time, targets side by side), written
    and installed with no network. A failed build is kept in its member's ``error``; the set of
    that target is then not written."""
    from dockerarch import build as build_module

    started = time.monotonic()
    wants, name = wanted.wants, wanted.set_name
    build_names, no_deps = wanted.build_names, wanted.no_deps
    made = []
    indexes = Indexes(wants, options.out / DOWNLOADS)
    for number, request in enumerate(requests):
        say = _sayer(progress, request.target.name)
        if number == 0:
            say(indexes.described())
        made.append(plan(request, wants, indexes, build_names=build_names, no_deps=no_deps,
                         say=say, tests=wanted.tests))  # fmt: skip

    for target_set in made:
        fetch(target_set, wants, options.out, _sayer(progress, target_set.target))

    work = make_work_dir(options.out, "wheelset")
    try:
        # each target's members in order, the targets side by side: a target's next member
        # starts when its own last build ends (one lock over what the targets share: the
        # indexes and their downloads)
        lock = threading.Lock()
        feeds = [_member_feed(t, work, wants, options, progress, lock) for t in made]
        build_module.run_queues(feeds, options, progress)
        for target_set in made:
            failed = [m for m in target_set.members.values() if m.error is not None]
            if failed:
                continue
            progress.reopen(target_set.target)
            try:
                write_set(target_set, options.out, name, wants, check=functools.partial(
                    check_installed, target_set, options, progress, wanted))  # fmt: skip
            except DockerarchError as exc:
                target_set.error = exc
            target_set.seconds = time.monotonic() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return made


def _member_feed(made: TargetSet, work: Path, wants: Wants, options: BuildOptions,
                 progress: Progress, lock: threading.Lock) -> Feed:  # fmt: skip
    """build.run_queues' feed of one target's set: its members' build requests in build order
    (those built earlier reused, with the cache), each result taken before the next (a build
    that asks for more build requirements is built again after them)."""
    queue = list(made.order)
    building: list[str] = []  # the member whose build ran last

    def _learn(key: str) -> None:
        # what a wheel says it needs, where its sdist did not: built next, before the rest; a
        # wheel built alone is built again after them, with its runtime image and smoke test
        member = made.members[key]
        if member.error is not None or not member.node.learn:
            return
        alone = bool((member.record or {}).get("wheelset", {}).get("wheel_only"))  # type: ignore[attr-defined]
        say = _sayer(progress, made.target)
        try:
            order = learn_requires(made, key, wants, options.out, say)
        except DockerarchError as exc:
            member.error = exc
            return
        if alone:
            say(f"set: {key} is built again after what it needs, for its runtime image and "
                "smoke test")  # fmt: skip
        queue[:0] = [*order, key] if alone else order

    def feed(result: JobResult | None) -> RenderRequest | None:
        with lock:
            if building and result is not None:
                key = building.pop()
                member = made.members[key]
                asked = asked_for(result) if result.error is not None else []
                if asked and not set(asked) <= set(member.asked) and len(member.asked) < 8:
                    say = _sayer(progress, made.target)
                    say(f"set: {key}'s build asks for {', '.join(asked)} besides the build "
                        "requirements it declares: adding them to its build environment")  # fmt: skip
                    first = extend_build_env(made, key, asked, wants, options.out, say)
                    queue[:0] = [*first, key]
                else:
                    take(member, result, options.accel)
                    _learn(key)
            while queue:
                key = queue.pop(0)
                member = made.members[key]
                try:
                    if options.cache and reuse(made, member, options, progress):
                        _learn(key)
                        continue
                    # hybrid: the native backend and generators take twins from the set
                    request = build_requests(made, key, work, twins=options.accel == "hybrid")
                except DockerarchError as exc:
                    member.error = exc
                    continue
                progress.reopen(made.target)
                progress.say(made.target, f"set: building {key} (needed by "
                             f"{needed_by(member)})")  # fmt: skip
                building.append(key)
                return request
            return None

    return feed


def _sayer(progress: Progress, target: str) -> Say:
    return lambda line: progress.say(target, line)


# A build requirement a backend asks for only when asked (PEP 517's get_requires_for_build_wheel)
# is learned from the build's own failure, in uv's words (those of the uv the toolchain pins;
# tests/unit/test_wheelset.py keeps them), not by calling the hook first with pyproject-hooks:
# that would cost every member an emulated build environment and backend start before its build
# (uv's own hook call is what the native backend runs natively), for what most sdists never ask.
_ASKED = re.compile(
    r"Because (\S+) was not found in the provided package locations and you "
    r"require ([^,\s]+),"
)
# pip's words (native and plain QEMU builds), from the subprocess that installs what the backend
# asked for: "ERROR: No matching distribution found for setuptools-scm>=8"
_ASKED_PIP = re.compile(r"No matching distribution found for (\S+)")


def asked_for(result: JobResult) -> list[str]:
    """The build requirements a failed member's build asked uv (or pip) for that its build
    environment lacked (PEP 517's get_requires_for_build_wheel: setup_requires, a backend's
    own asks)."""
    text = "\n".join(getattr(result.error, "tail", None) or [])
    if result.log is not None and result.log.is_file():
        text += result.log.read_text(errors="replace")
    return sorted({spec for _, spec in _ASKED.findall(text)} | set(_ASKED_PIP.findall(text)))


def extend_build_env(made: TargetSet, key: str, asked: list[str], wants: Wants, out: Path,
                     say: Say) -> list[str]:  # fmt: skip
    """``asked`` added to the member's build environment: resolved for the target beside what
    the set holds, new wheels fetched, new sdists to build returned in their build order."""
    member = made.members[key]
    member.asked = sorted(set(member.asked) | set(asked))
    found = {k: m.node for k, m in made.members.items()}
    target = python_target(made.request.target)
    new = closure.complete_builds(found, [member.node], target, made.indexes,
                                  say=say, extra={key: member.asked},
                                  constraints=closure.constraints_for(wants.build_constraints, target),
                                  build_names=closure.build_env_sdists(wants),
                                  hashes=wants.build_hashes_for)  # fmt: skip
    for node in new:
        made.members.setdefault(node.key, Member(node=node))
    fetch(made, wants, out, say)
    order = _build_order(made, {n.key for n in new if not n.candidate.is_wheel})
    made.order = [*order, *[k for k in made.order if k not in order]]
    return order


def _build_order(made: TargetSet, keys: set[str]) -> list[str]:
    """``keys`` (members to build) in the order their builds and run-time needs among them ask."""
    graph = {k: {d for d in (set(made.members[k].node.build_env.values()) | made.members[k].node.requires)
                 if d in keys} for k in keys}  # fmt: skip
    return list(graphlib.TopologicalSorter(graph).static_order())


def learn_requires(made: TargetSet, key: str, wants: Wants, out: Path, say: Say) -> list[str]:
    """What a member's wheel says it needs at run time, where its sdist did not say (its node's
    ``learn``): kept for the next resolution (Indexes.learn), added to the set, new wheels
    fetched; the new sdists to build, in their build order."""
    member = made.members[key]
    if not member.node.learn or member.path is None:
        return []
    lines = list(wheel_metadata(member.path).get_all("Requires-Dist") or [])
    target = python_target(made.request.target)
    made.indexes.learn(member.node.candidate.file, target, lines)
    found = {k: m.node for k, m in made.members.items()}
    new = closure.complete_requires(found, member.node, lines, target, made.indexes, wants=wants,
                                    build_names=made.build_names, say=say)  # fmt: skip
    for node in new:
        made.members.setdefault(node.key, Member(node=node))
    built = {n.key for n in new if not n.candidate.is_wheel}
    if made.no_deps and built:
        raise UsageError(
            f"With --no-deps, dockerarch builds only what it is asked, but {key}'s wheel says it "
            f"needs {', '.join(sorted(built))}, which the index has no wheel of for the board",
            fix="Drop --no-deps to build them in the set as well.",
        )
    fetch(made, wants, out, say)
    order = _build_order(made, built)
    at = made.order.index(key) + 1 if key in made.order else 0
    made.order[at:at] = [k for k in order if k not in made.order]
    return order
