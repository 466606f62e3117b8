"""A wheel set's closure: every distribution a board needs for what it was asked, resolved for the
board's own Python (markers, tags, glibc), with the build requirements of what must be built.

Resolution is one step before anything is built (pip's resolver's shape, through resolvelib,
pip's own backtracking resolver library). For each distribution the newest version the
requirements, constraints and hashes allow wins; its file is a wheel the target's pip accepts when
the index has one, else its sdist. Dependencies come from core metadata: the wheel's (PEP 658's
``.metadata`` file when the index serves one, else the wheel itself), or the sdist's own when it
is static (PKG-INFO of metadata 2.2+ without dynamic Requires-Dist, or pyproject.toml's
[project]), else the metadata of any wheel of the same version on the index (uv's rule: one
version, one set of dependencies), else what its own build's wheel said once (``learned``,
kept beside the sdist in the downloads cache). An sdist that says nothing before it is built (a
setup.py's install_requires) resolves with no dependencies at first, marked ``learn``: the set
builds it, reads its wheel and adds what it needs (complete_requires). Each sdist's build
requirements (PEP 518's ``requires``) are resolved the same way, preferring what the set
already holds, so numpy is built once per target.

Indexes are searched as uv searches them (``first-index``): the extra indexes first, in the order
given, then ``--index-url`` (or pip's default), and the first that has a project is the only one
asked about it. A private name on an ``--extra-index-url`` is never taken from the public
default index, even when the public one has a newer version.

"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    canonicalize_name,
)

from dockerarch.pyenv import PythonTarget
from dockerarch.pyreqs import ALL, Wanted, Wants
from dockerarch.sets.errors import ResolutionError
from dockerarch.sets.indexes import Indexes, Say
from dockerarch.sets.metadata import build_requires, sdist_members
from dockerarch.sets.resolver import (
    Asked,
    Candidate,
    Provider,
    parse_requirement,
    resolve_roots,
    without_marker,
)


@dataclass(kw_only=True)
class Resolved:
    """One distribution of the set: what is installed, and for sdists what their build needs."""

    candidate: Candidate
    requires: set[str] = field(default_factory=set)  # keys of the run-time dependencies
    needed_by: set[str] = field(default_factory=set)  # keys (or 'the requirements') that ask
    build_env: dict[str, str] = field(default_factory=dict)  # name -> key, sdists only
    runtime: bool = True  # installed on the board (False: only some build needs it)
    test: bool = False  # installed for the user's tests (--test-requires), not on the board
    learn: bool = False  # an sdist whose run-time requirements its built wheel tells (learned)
    extras: set[str] = field(default_factory=set)  # what any requirement asked of it (old[fast])

    @property
    def key(self) -> str:
        return self.candidate.key


def constraints_for(lines: Sequence[Wanted], target: PythonTarget) -> dict[str, SpecifierSet]:
    """Constraint lines as one specifier per name, markers evaluated for the target."""
    constraints: dict[str, SpecifierSet] = {}
    for c in lines:
        if c.requirement.marker is None or c.requirement.marker.evaluate(target.markers):
            constraints[c.name] = constraints.get(c.name, SpecifierSet()) & c.requirement.specifier
    return constraints


def resolve(wants: Wants, target: PythonTarget, indexes: Indexes, *, say: Say | None = None,
            build_names: frozenset[str] = frozenset(),
            tests: Sequence[Requirement] = (), learn: bool = False) -> dict[str, Resolved]:  # fmt: skip
    """The whole set for ``target``: the requirements' closure, what the user's tests need beside
    it (``tests``, with the set's versions pinned), then each sdist's build requirements
    (recursively), by key (``name==version``). ``build_names`` are taken from their sdists even
    where a wheel fits. With ``learn``, an sdist whose run-time requirements only its build
    tells is resolved with none so far and marked ``learn`` (else it is refused)."""
    constraints = constraints_for(wants.constraints, target)
    roots = [Asked(without_marker(w.requirement), None) for w in wants.requirements
             if w.requirement.marker is None or w.requirement.marker.evaluate({**target.markers, "extra": ""})]  # fmt: skip
    provider = Provider(indexes, target, constraints=constraints, hashes=wants.hashes_for, prefer={},
                        build_names=build_names, learn=learn)  # fmt: skip
    chosen = resolve_roots(provider, roots)
    found: dict[str, Resolved] = {}
    _add(found, chosen, provider, root_names={r.requirement.name for r in roots}, runtime=True)
    unknown = set(provider.unknown)
    if tests:
        pins = [Asked(Requirement(r.key), None) for r in found.values()]
        test_roots = [Asked(without_marker(t), "--test-requires") for t in tests]
        test_provider = Provider(indexes, target, constraints=constraints, hashes=lambda _n: None,
                                 prefer={}, learn=learn)  # fmt: skip
        for node in _add(found, resolve_roots(test_provider, pins + test_roots), test_provider,
                         root_names={t.name for t in tests}, runtime=False,
                         asked_by="--test-requires"):  # fmt: skip
            node.test = True
        unknown |= test_provider.unknown
    for key in unknown & found.keys():
        found[key].learn = True
    complete_builds(found, [r for r in found.values() if not r.candidate.is_wheel], target,
                    indexes, say=say, constraints=constraints_for(wants.build_constraints, target),
                    build_names=build_env_sdists(wants), hashes=wants.build_hashes_for)  # fmt: skip
    return found


def build_env_sdists(wants: Wants) -> frozenset[str]:
    """What build environments take from sdists: the names --no-binary gives, as pip applies them
    to build environments too (a like-for-like amd64 build of what armv7 must compile, cffi
    for zstandard, names it). Not `:all:`: the build tools themselves (setuptools, wheel) stay
    wheels, or no build could start."""
    return frozenset(wants.no_binary) - {ALL}


def complete_builds(found: dict[str, Resolved], pending: list[Resolved], target: PythonTarget,
                    indexes: Indexes, *, say: Say | None = None,
                    extra: Mapping[str, Sequence[str]] | None = None,
                    constraints: Mapping[str, SpecifierSet] | None = None,
                    build_names: frozenset[str] = frozenset(),
                    hashes: Callable[[str], frozenset[str] | None] | None = None) -> list[Resolved]:  # fmt: skip
    """Resolve the build environment of each sdist in ``pending`` (its static build
    requirements, with ``extra[key]`` besides: what its build asked for on its own), and of each
    sdist that adds, recursively, preferring versions ``found`` holds and keeping to
    ``constraints`` (--build-constraint's) and taking ``build_names`` from their sdists
    (build_env_sdists), each file's sha256 one ``hashes`` allows (--build-constraint's --hash
    lines under hash checking); the new nodes."""
    done: set[str] = set()
    new: list[Resolved] = []
    while pending:
        node = pending.pop(0)
        if node.key in done:
            continue
        done.add(node.key)
        members = sdist_members(indexes.download(node.candidate.file), "pyproject.toml")
        lines = build_requires(members) + list((extra or {}).get(node.key, ()))
        if say:
            say(f"{node.key} builds with {', '.join(lines) or 'nothing'}")
        build_roots = []
        for line in lines:
            requirement = parse_requirement(line, node.candidate)
            if requirement.marker is None or requirement.marker.evaluate(
                {**target.markers, "extra": ""}
            ):
                build_roots.append(Asked(without_marker(requirement), node.key))
        prefer = {r.candidate.name: r.candidate.version for r in found.values()}
        build_provider = Provider(indexes, target, constraints=constraints or {},
                                  hashes=hashes or (lambda _n: None), prefer=prefer,
                                  build_names=build_names)  # fmt: skip
        env = resolve_roots(build_provider, build_roots) if build_roots else {}
        node.build_env = {c.name: c.key for c in env.values()}
        added = _add(found, env, build_provider, root_names={r.requirement.name for r in build_roots},
                     runtime=False, asked_by=node.key)  # fmt: skip
        new.extend(added)
        pending.extend(r for r in added if not r.candidate.is_wheel)
    return new


def complete_requires(found: dict[str, Resolved], node: Resolved, lines: Sequence[str],
                      target: PythonTarget, indexes: Indexes, *, wants: Wants,
                      build_names: frozenset[str] = frozenset(),
                      say: Say | None = None) -> list[Resolved]:  # fmt: skip
    """What ``node``'s built wheel says it needs at run time (``lines``, its Requires-Dist) added
    to the set: resolved for the target with every distribution the board installs held at its
    version (they are built or fetched already), new ones with their build environments; the
    new nodes. A requirement the set's versions do not meet is an error whose fix is a new run,
    which resolves knowing it from the start (Indexes.learn keeps it)."""
    node.learn = False
    # the extras the requirements or another member ask of it (dyn[fast]), as the resolver gives
    # them to any other
    asked = {e for w in wants.requirements if w.name == node.candidate.name
             for e in w.requirement.extras} | node.extras  # fmt: skip
    extras = {"", *asked}
    roots = []
    for line in lines:
        requirement = parse_requirement(line, node.candidate)
        marker = requirement.marker
        if marker is None or any(marker.evaluate({**target.markers, "extra": e}) for e in extras):
            roots.append(Asked(without_marker(requirement), node.key))
    if not roots:
        return []
    held = {r.candidate.name: SpecifierSet(f"=={r.candidate.version}")
            for r in found.values() if r.runtime}  # fmt: skip
    constraints = constraints_for(wants.constraints, target)
    for name, pin in held.items():
        constraints[name] = constraints.get(name, SpecifierSet()) & pin
    provider = Provider(indexes, target, constraints=constraints, hashes=wants.hashes_for,
                        prefer={}, build_names=build_names, learn=True)  # fmt: skip
    try:
        chosen = resolve_roots(provider, roots)
    except ResolutionError as exc:
        raise ResolutionError(
            f"{node.key} was built, and its wheel says it needs {', '.join(lines)}; the set as "
            f"resolved before it was built does not allow that ({exc.problem})",
            fix="Run the same command again: what the wheel said is kept, so the set is resolved "
            "with it from the start (and what was built is reused).",
        ) from exc
    added = _add(found, chosen, provider, root_names={r.requirement.name for r in roots},
                 runtime=node.runtime, asked_by=node.key)  # fmt: skip
    names = {canonicalize_name(r.requirement.name) for r in roots}
    node.requires |= {c.key for c in chosen.values() if c.name in names}
    for key in node.requires:
        found[key].needed_by.add(node.key)
    for other in added:
        other.learn, other.test = other.key in provider.unknown, node.test and not other.runtime
    if say:
        say(f"{node.key} needs {', '.join(sorted(node.requires))} (its wheel says)")
    sdists = [r for r in added if not r.candidate.is_wheel]
    return added + complete_builds(found, sdists, target, indexes, say=say,
                                   constraints=constraints_for(wants.build_constraints, target),
                                   build_names=build_env_sdists(wants),
                                   hashes=wants.build_hashes_for)  # fmt: skip


def _add(found: dict[str, Resolved], chosen: Mapping[str, Candidate], provider: Provider, *,
         root_names: set[str], runtime: bool, asked_by: str = "the requirements") -> list[Resolved]:  # fmt: skip
    """Record a resolution's candidates with their edges; the new ones are returned."""
    added: list[Resolved] = []
    by_name = {c.name: c for c in chosen.values()}
    for candidate in by_name.values():
        node = found.get(candidate.key)
        if node is None:
            node = found[candidate.key] = Resolved(candidate=candidate, runtime=runtime)
            added.append(node)
        node.runtime = node.runtime or runtime
        if canonicalize_name(candidate.name) in {canonicalize_name(n) for n in root_names}:
            node.needed_by.add(asked_by)
        for dependency in provider.get_dependencies(candidate):
            other = by_name.get(canonicalize_name(dependency.requirement.name))
            if other is not None:
                node.requires.add(other.key)
    for candidate in by_name.values():  # old[fast]: the extras, kept for a learned node
        found[candidate.key].extras |= provider.extras_chosen.get(candidate.name, set())
    for node in list(found.values()):
        for key in node.requires:
            if key in found:
                found[key].needed_by.add(node.key)
    return added
