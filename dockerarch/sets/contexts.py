"""What a member's build is given: its unpacked sdist (checked against what was resolved), the
wheel recipe's request, and the named contexts of its build environment's and its run-time
closure's wheels (with the x86-64 twins of compiled build requirements).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion

from dockerarch import artifacts, sdistfix
from dockerarch.accel import BACKEND_I386, DRIVER_WHEELS, NATIVE_SPEEDUPS
from dockerarch.artifacts import ArtifactReport
from dockerarch.errors import DockerarchError
from dockerarch.files import link_or_copy
from dockerarch.pyenv import python_target
from dockerarch.recipes import local_package, with_declared_compilers
from dockerarch.render import RenderRequest
from dockerarch.sets.errors import ResolutionError
from dockerarch.sets.metadata import sdist_members
from dockerarch.sets.model import Member, SetBuildFailed, TargetSet
from dockerarch.sets.resolver import same_distribution, says_it_is


def build_requests(made: TargetSet, key: str, work: Path, *, twins: bool = False) -> RenderRequest:
    """The wheel recipe's request for one member: its unpacked sdist, and the wheelset contexts
    (the build step's: its build environment's wheels and build-constraints.txt, with ``twins``
    the x86-64 twins of its compiled build requirements too (native_twins); the runtime image's:
    its run-time closure's wheels)."""
    member = made.members[key]
    candidate = member.node.candidate
    sdist = made.indexes.download(candidate.file)
    info = sdist_members(sdist, "PKG-INFO").get("PKG-INFO")
    if info is not None:  # what the sdist says of itself (its built wheel is checked after)
        same_distribution(candidate, *says_it_is(info), f"The sdist {candidate.file.filename}")
    tree = unpack_sdist(sdist, work / made.target / "sdists" / key.replace("==", "-"))
    member.fixed = sdistfix.apply(candidate.name, str(candidate.version), tree)
    sets = work / made.target / "sets"
    sets.mkdir(parents=True, exist_ok=True)
    # a member built again (its build asked for more) gets a new one: each its own name; its
    # build step's part apart from its runtime image's (RenderRequest.wheelset_build)
    context = Path(tempfile.mkdtemp(prefix=key.replace("==", "-") + "-", dir=sets))
    build_part, run_part = context / "build", context / "run"
    build_part.mkdir()
    run_part.mkdir()
    build_env, run_time = set(member.node.build_env.values()), runtime_closure(made, key)
    pins = []
    for other in sorted(build_env | run_time):
        have = made.members[other]
        if have.path is None:  # an earlier build failed: this one cannot be built
            raise SetBuildFailed(
                f"{key} for {made.target} cannot be built: {other}, which its build needs, "
                "was not built",
                fix=f"Fix {other}'s build first (its error above); the rest of the set is kept.",
            )
        if other in build_env:
            link_or_copy(have.path, build_part / have.path.name)
            pins.append(other)
        if other in run_time:
            link_or_copy(have.path, run_part / have.path.name)
    (build_part / "build-constraints.txt").write_text("".join(f"{p}\n" for p in pins))
    if twins:
        native_twins(made, pins, build_part)
    # the version that was resolved names the result, never the tree's own spelling of it
    spec = dataclasses.replace(local_package(tree), version=str(candidate.version))
    # cmake and ninja in the build environment: the recipe installs Debian's, so the hybrid build
    # grafts their x86-64 builds as drivers and offers their native wheels (VERSION+
    # dockerarch.native, which the set's pin VERSION admits) to uv: the configure runs natively.
    drivers = tuple(apt for apt, name in DRIVER_WHEELS.items()
                    if name in member.node.build_env and apt not in made.request.recipe.apt)  # fmt: skip
    # what the distribution is known to need from Debian (data/build-needs.yaml), and the
    # compilers its build system declares (scipy's meson.build: Fortran)
    needs = tuple(p for p in build_needs().get(canonicalize_name(candidate.name), ())
                  if p not in made.request.recipe.apt and p not in drivers)  # fmt: skip
    recipe = dataclasses.replace(made.request.recipe, apt=made.request.recipe.apt + drivers + needs)
    recipe = with_declared_compilers(recipe, tree)
    return dataclasses.replace(made.request, recipe=recipe, package=spec,
                               version=spec.version or "any", wheelset=run_part,
                               wheelset_build=build_part,
                               installed_with=installed_with(made, key),
                               runtime_needs=runtime_needs(made, key),
                               wheel_only=member.node.learn,
                               fetched=candidate.name not in made.indexes.directories)  # fmt: skip


def runtime_needs(made: TargetSet, key: str) -> tuple[str, ...]:
    """The target's packages the wheels of ``key``'s run-time closure need (what their builds
    installed in their runtime images: ``needs_apt``), which ``key``'s runtime image installs them
    with: its build stage never linked against those libraries, so it cannot name the packages."""
    found = {str(p) for other in runtime_closure(made, key)
             for p in (made.members[other].record or {}).get("needs_apt") or []}  # type: ignore[attr-defined]  # fmt: skip
    return tuple(sorted(found))


def installed_with(made: TargetSet, key: str) -> tuple[ArtifactReport, ...]:
    """The set's other board wheels when ``key``'s runtime image installs the whole set (every
    board package is ``key`` or in its run-time closure, which pip installs from the set with it):
    that image's checks then cover their libraries, modules and versions too, and the set's own
    check takes the image (set_runtime_image). () when the set holds more."""
    member = made.members[key]
    board = {k for k, m in made.members.items() if m.node.runtime or m.node.test}
    others = board - {key}
    if not member.node.runtime or not others or not others <= runtime_closure(made, key):
        return ()
    return tuple(member_report(made, made.members[k]) for k in sorted(others))


def member_report(made: TargetSet, member: Member) -> ArtifactReport:
    """A member's wheel through the board-ABI gate (a fetched one was at its download)."""
    assert member.path is not None
    if member.report is None:
        member.report = artifacts.board_gate(member.path, made.request.target,
                                           fetched=not member.built)  # fmt: skip
    return member.report


def native_twins(made: TargetSet, pins: list[str], context: Path) -> list[str]:
    """The x86-64 wheels, of the same versions, of the build requirements ``pins`` whose wheels
    for the target are compiled (numpy, cffi, Cython), or pure where x86-64's is compiled
    (NATIVE_SPEEDUPS: Cython 3.0 on armv7), hash-checked from the set's indexes into
    ``context``: a hybrid build's native PEP 517 backend and native Cython (every target) take
    their twins from there, as the build environment takes the target's
    (dockerarch_native_backend). A 32-bit target's compiled ones get their i686 wheels too: its
    backend runs in the i386 interpreter. One the indexes do not have is left out: that build's
    backend then runs emulated, and says why, and Cython from its pure-Python modules. Their
    file names."""
    i386 = made.request.target.debian_arch in BACKEND_I386
    machines = ["x86_64", *(["i686"] if i386 else [])]
    found = []
    for key in pins:
        have = made.members[key]
        if have.path is None:
            continue
        pure = all(t.platform == "any" for t in parse_wheel_filename(have.path.name)[3])
        if pure and canonicalize_name(have.node.candidate.name) not in NATIVE_SPEEDUPS:
            continue
        candidate = have.node.candidate
        try:
            _, files = made.indexes.files(candidate.name)
        except DockerarchError:
            continue
        # the x86-64 one for the native code generators; a pure one's speed-ups only for them
        for machine in machines[:1] if pure else machines:
            native = python_target(made.request.target, machine=machine)
            ranked = []
            for file in files:
                try:
                    version = parse_wheel_filename(file.filename)[1]
                except (InvalidWheelFilename, InvalidVersion):
                    continue
                rank = native.tag_rank(file.filename)
                own = pure and file.filename == have.path.name  # the target's own: nothing compiled
                if (
                    version == candidate.version
                    and rank is not None
                    and not file.yanked
                    and not own
                ):
                    ranked.append((rank, file.filename, file))
            if ranked:
                file = min(ranked, key=lambda r: r[:2])[2]
                link_or_copy(made.indexes.download(file), context / file.filename)
                found.append(file.filename)
    return found


@functools.cache
def build_needs() -> dict[str, tuple[str, ...]]:
    """data/build-needs.yaml: the Debian packages a distribution's build needs, by name."""
    import yaml

    from dockerarch.paths import data_path

    data = yaml.safe_load(data_path("build-needs.yaml").read_text(encoding="utf-8")) or {}
    return {str(canonicalize_name(k)): tuple(str(p) for p in v) for k, v in data.items()}


def runtime_closure(made: TargetSet, key: str) -> set[str]:
    """The keys a member needs at run time, its own dependencies' too (not itself)."""
    seen: set[str] = set()
    stack = list(made.members[key].node.requires)
    while stack:
        other = stack.pop()
        if other in seen or other not in made.members:
            continue
        seen.add(other)
        stack.extend(made.members[other].node.requires)
    seen.discard(key)
    return seen


def unpack_sdist(sdist: Path, destination: Path) -> Path:
    """The sdist's one top-level directory at ``destination`` (tar with Python's 'data' filter:
    no absolute paths, no links out, no devices; zip members checked the same way)."""
    partial = destination.with_name(destination.name + ".part")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        if sdist.name.endswith(".zip"):
            with zipfile.ZipFile(sdist) as archive:
                for name in archive.namelist():
                    if name.startswith("/") or ".." in Path(name).parts:
                        raise tarfile.OutsideDestinationError(None, name)  # type: ignore[arg-type]
                archive.extractall(partial)
        else:
            with tarfile.open(sdist) as archive:
                archive.extractall(partial, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise ResolutionError(
            f"{sdist.name} cannot be unpacked safely: {exc}",
            fix="The sdist is broken or holds paths outside its directory; pick another version.",
        ) from exc
    tops = [p for p in partial.iterdir()]
    if len(tops) != 1 or not tops[0].is_dir():
        raise ResolutionError(f"{sdist.name} does not hold one top-level directory",
                              fix="The sdist is not laid out as PEP 517 says; pick another version.")  # fmt: skip
    shutil.rmtree(destination, ignore_errors=True)
    os.replace(tops[0], destination)
    shutil.rmtree(partial, ignore_errors=True)
    return destination
