"""`dockerarch build wheel -r requirements.txt`: every wheel a board needs, built once per target,
installed with no compiler.

For each target the set is resolved first (closure.resolve: the requirements' closure for the
board's Python, and each sdist's build requirements), then:

1. every distribution with a wheel that fits the board is downloaded, its hash checked, and put
   through the board-ABI gate a built wheel passes (pkgindex.gate_file);
2. every other one is built hybrid from its sdist, in dependency order, as `build wheel` builds a
   source tree, with the named context ``wheelset``: the wheels its build requirements resolved to
   (and its run-time closure) and ``build-constraints.txt`` pinning them. Its build environment
   takes them from there with no index (no sdist is built on the side: numpy is the set's numpy)
   and its runtime image installs from there with no network;
3. the set is written to ``OUT/<target>/sets/<name>/``: its wheels, ``requirements.txt`` with
   every file's sha256 (the lock file: any pip on any board reads it, --require-hashes), and
   manifest.json (what was fetched from where, what was built with each build's record, and the
   apt packages the board needs);
4. the set is installed into the target's runtime image from the set alone (no index, no
   network) and every top-level module of it imported there, under QEMU.

Wheels land in ``OUT/<target>/wheels/`` (fetched) and in each build's own result directory
(built); a build that fails is said with the package that needed it, the rest is kept, and a
re-run builds only what is missing.
"""

from __future__ import annotations

import dataclasses
import functools
import graphlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion

from dockerarch import closure, pkgindex, sdistfix, simple_api
from dockerarch.accel import BACKEND_I386, DRIVER_WHEELS, NATIVE_SPEEDUPS
from dockerarch.artifacts import ArtifactReport, VerificationError
from dockerarch.build import Feed, JobResult, Progress
from dockerarch.buildsteps import BuildOptions, JobState
from dockerarch.closure import Indexes, ResolutionError, Resolved
from dockerarch.errors import DockerarchError, UsageError
from dockerarch.files import context_name, link_or_copy, make_work_dir, replace_dir, sha256_file
from dockerarch.pyenv import python_target
from dockerarch.pyreqs import Wants
from dockerarch.recipes import directory_named, local_package, with_declared_compilers
from dockerarch.render import RenderRequest
from dockerarch.targets import BoardTarget

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


# --- 1. resolve ----------------------------------------------------------------------------------


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


# --- 2. fetch --------------------------------------------------------------------------------------


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
            member.report = pkgindex.gate_file(path, made.request.target, fetched=True)
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


# --- 3. build ----------------------------------------------------------------------------------


PARALLELISM = ("MAX_JOBS",)  # options that change how fast a build runs, never what it makes


def previous_result(out: Path, made: TargetSet, member: Member, accel: str) -> tuple[Path, dict[str, object], Path] | None:  # fmt: skip
    """A result of this package's build for this target made as this build would make it, still
    the file it verified: (directory, manifest, wheel). The same sdist (sha256), build
    environment (every pin), options, acceleration mode and dockerarch version: after numpy 1 ->
    2 in its build environment, or another --set, the member is built again."""
    candidate = member.node.candidate
    name = canonicalize_name(candidate.name).replace("-", "_")
    directory = out / made.target / f"{name}-{candidate.version}"
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    record = manifest.get("wheelset") or {}
    sdist = record.get("sdist") or {}
    if sdist.get("sha256") != candidate.file.sha256 or not candidate.file.sha256:
        return None
    if record.get("wheel_only"):
        return None  # built before what it needs was known: built again, with them
    from dockerarch import __version__

    def made_with(options: object) -> dict[str, object]:
        given = options if isinstance(options, dict) else {}
        return {k: str(v) for k, v in given.items() if k not in PARALLELISM}

    if (record.get("build_env") != sorted(member.node.build_env.values())
            or record.get("accel") != accel or manifest.get("dockerarch") != __version__
            or made_with(manifest.get("options")) != made_with(dict(made.request.options))):  # fmt: skip
        return None
    for artifact in manifest.get("artifacts", []):
        path = directory / str(artifact.get("name"))
        if (
            artifact.get("kind") == "wheel"
            and path.is_file()
            and sha256_file(path) == artifact.get("sha256")
        ):
            return directory, manifest, path
    return None


def build_requests(made: TargetSet, key: str, work: Path, *, twins: bool = False) -> RenderRequest:
    """The wheel recipe's request for one member: its unpacked sdist, and the wheelset contexts
    (the build step's: its build environment's wheels and build-constraints.txt, with ``twins``
    the x86-64 twins of its compiled build requirements too (native_twins); the runtime image's:
    its run-time closure's wheels)."""
    member = made.members[key]
    candidate = member.node.candidate
    sdist = made.indexes.download(candidate.file)
    info = closure.sdist_members(sdist, "PKG-INFO").get("PKG-INFO")
    if info is not None:  # what the sdist says of itself (its built wheel is checked after)
        closure.same_distribution(
            candidate, *closure.says_it_is(info), f"The sdist {candidate.file.filename}"
        )
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
    return tuple(_report(made, made.members[k]) for k in sorted(others))


def _report(made: TargetSet, member: Member) -> ArtifactReport:
    """A member's wheel through the board-ABI gate (a fetched one was at its download)."""
    assert member.path is not None
    if member.report is None:
        member.report = pkgindex.gate_file(member.path, made.request.target,
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


# --- 4. the set, written and installed --------------------------------------------------------------


def lock_lines(made: TargetSet) -> list[str]:
    """requirements.txt: every run-time member pinned with its file's sha256."""
    lines = [f"# The wheel set for {made.target} ({made.request.target.platform}, Python "
             f"{made.request.target.python}), written by dockerarch. On the board:",
             "#   pip install --no-index --find-links DIR --only-binary :all: --require-hashes -r requirements.txt"]  # fmt: skip
    for member in sorted(made.members.values(), key=lambda m: m.node.candidate.name):
        if not member.node.runtime or member.path is None:
            continue
        digest = sha256_file(member.path)
        lines.append(f"{member.node.candidate.name}=={member.node.candidate.version} \\")
        lines.append(f"    --hash=sha256:{digest}")
    return lines


def write_set(made: TargetSet, out: Path, name: str, wants: Wants,
              check: Callable[[Path], None] | None = None) -> Path:  # fmt: skip
    """OUT/<target>/sets/<name>/: the board's wheels, requirements.txt (hashed), manifest.json
    and the check's log, written beside and renamed into place only once ``check`` (given the
    directory as it is made) passed: a set that fails it replaces no earlier one."""
    parent = out / made.target / SETS
    parent.mkdir(parents=True, exist_ok=True)
    work = make_work_dir(parent, name)
    landing = work / context_name("set", work)  # the check's `wheelset` context: its own name
    landing.mkdir()
    entries = []
    needs: set[str] = set()
    for member in sorted(made.members.values(), key=lambda m: m.node.candidate.name):
        candidate = member.node.candidate
        assert member.path is not None
        if member.node.runtime:
            link_or_copy(member.path, landing / member.path.name)
        record = member.record or {}
        needs.update(str(p) for p in record.get("needs_apt") or [])  # type: ignore[attr-defined]
        entries.append({
            "name": candidate.name, "version": str(candidate.version),
            "file": member.path.name, "sha256": sha256_file(member.path),
            "how": "built" if member.built else "fetched",
            "runtime": member.node.runtime,
            "needed_by": sorted(member.node.needed_by),
            "requires": sorted(member.node.requires),
            **({"from": simple_api.redacted(candidate.file.url), "index_sha256": candidate.file.sha256}
               if not member.built else {
                   "sdist": {"file": candidate.file.filename, "url": simple_api.redacted(candidate.file.url),
                             "sha256": candidate.file.sha256},
                   "build_env": sorted(member.node.build_env.values()),
                   "sdist_fixes": member.fixed,
                   "result": str(member.result), "reused": member.reused,
                   "build": {k: record.get(k) for k in ("seconds", "hybrid", "accel", "needs_apt",
                                                        "smoke", "options", "base")},
               }),
        })  # fmt: skip
    made.needs_apt = sorted(needs)
    (landing / "requirements.txt").write_text("\n".join(lock_lines(made)) + "\n")
    try:
        if check is not None:
            check(landing)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    manifest = {
        "set": name,
        "target": made.target,
        "platform": made.request.target.platform,
        "python": made.request.target.python,
        "requirements": [f"{w.requirement} ({w.where})" for w in wants.requirements],
        "constraints": [f"{w.requirement} ({w.where})" for w in wants.constraints],
        "build_constraints": [f"{w.requirement} ({w.where})" for w in wants.build_constraints],
        "no_binary": sorted(wants.no_binary),
        "indexes": [
            simple_api.redacted(u)
            for u in (*wants.extra_index_urls, wants.index_url or "pip's default")
        ],
        "find_links": [str(d) for d in wants.find_links],
        "build_order": made.order,
        "distributions": entries,
        "needs_apt": made.needs_apt,
        "installed_check": made.check,
        "tests": made.tests,
        "fetched": sum(1 for e in entries if e["how"] == "fetched"),
        "built": sum(1 for e in entries if e["how"] == "built"),
        "size": sum((landing / str(e["file"])).stat().st_size for e in entries if e["runtime"]),
        "seconds": round(time.monotonic() - made.started, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (landing / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    final = parent / name
    replace_dir(landing, final)
    shutil.rmtree(work, ignore_errors=True)
    made.directory = final
    return final


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


# --- the whole job ---------------------------------------------------------------------------------


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

    def asked(lines: object) -> list[str]:  # "REQ (FILE:LINE)": where it stood may move
        return sorted(str(line).rsplit(" (", 1)[0] for line in lines or [])  # type: ignore[attr-defined]

    now = {"requirements": asked(f"{w.requirement} ()" for w in wants.requirements),
           "constraints": asked(f"{w.requirement} ()" for w in wants.constraints),
           "build_constraints": asked(f"{w.requirement} ()" for w in wants.build_constraints)}  # fmt: skip
    for target, directory in found:
        try:
            manifest = json.loads((directory / "manifest.json").read_text())
        except (OSError, ValueError):
            continue  # no set there: said by whoever reads its wheels
        then = {key: asked(manifest.get(key)) for key in now}
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
    for request in requests:
        say = _sayer(progress, request.target.name)
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
                    _take(member, result, options.accel)
                    _learn(key)
            while queue:
                key = queue.pop(0)
                member = made.members[key]
                try:
                    if options.cache and _reuse(made, member, options, progress):
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


def _reuse(made: TargetSet, member: Member, options: BuildOptions, progress: Progress) -> bool:
    found = previous_result(options.out, made, member, options.accel)
    if found is None:
        return False
    member.result, member.record, member.path = found
    member.reused = True
    progress.say(made.target, f"set: {member.key} already built ({member.result})")
    return True


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
    lines = list(closure.wheel_metadata(member.path).get_all("Requires-Dist") or [])
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


def _take(member: Member, result: JobResult, accel: str) -> None:
    """A finished build's wheel into the member, and the sdist it came from into its
    manifest.json (what a re-run compares)."""
    from dockerarch.files import write_atomic

    error = result.error
    wheels = [p for p in result.artifacts if p.name.endswith(".whl")]
    if error is None:
        assert result.directory is not None and wheels
        try:
            _made_the_member(member, wheels[0])
        except ResolutionError as exc:
            error = exc
    if error is not None:
        step = getattr(error, "step", None)
        member.error = SetBuildFailed(
            f"{member.key} could not be built for {result.target} (needed by "
            f"{needed_by(member)}): " + ("its build failed" if step else error.problem),
            fix=(error.fix or "See its build log.")
            + " The rest of the set is kept; run the same command again to build what is missing.",
        )
        member.error.tail = tuple(getattr(error, "tail", None) or ())[-15:]
        member.error.log = result.log
        member.error.__cause__ = error
        return
    assert result.directory is not None
    manifest_path = result.directory / "manifest.json"
    record = json.loads(manifest_path.read_text())
    file = member.node.candidate.file
    record["wheelset"] = {
        "sdist": {
            "file": file.filename,
            "url": simple_api.redacted(file.url),
            "sha256": file.sha256,
        },
        "build_env": sorted(member.node.build_env.values()),
        "accel": accel,  # the mode asked for (reuse: previous_result)
        # built before what it needs was known (no runtime image): never reused as a result
        "wheel_only": member.node.learn,
    }
    write_atomic(manifest_path, (json.dumps(record, indent=2) + "\n").encode())
    member.result, member.record, member.path = result.directory, record, wheels[0]


def _made_the_member(member: Member, wheel: Path) -> None:
    """The wheel a member's build made is the member: its file name and its METADATA name the
    project and version the lock pins (an sdist's setup.py can build anything)."""
    what = f"The wheel {wheel.name} its build made"
    try:
        name, version = (str(p) for p in parse_wheel_filename(wheel.name)[:2])
    except InvalidWheelFilename:
        name, version = wheel.name, ""
    closure.same_distribution(member.node.candidate, name, version, f"{what} (its file name)")
    try:
        metadata: bytes | None = closure.wheel_metadata(wheel).as_bytes()
    except (OSError, zipfile.BadZipFile, DockerarchError):
        metadata = None
    closure.same_distribution(member.node.candidate, *closure.says_it_is(metadata), what)


class SetTestFailed(DockerarchError):
    """The installed set failed its import or the user's tests (--test)."""

    exit_code = 8


def check_installed(made: TargetSet, options: BuildOptions, progress: Progress,
                    wanted: SetRequest, landing: Path) -> None:  # fmt: skip
    """The set (``landing``) installed into the target's runtime image from the set alone (no
    index, no network, --only-binary), the libraries its wheels need found by the target's
    loader (the board's apt packages installed for them), every top-level module imported, then
    the user's tests (--test, with --test-requires installed beside the set), under QEMU. Its log
    is the set's check.log."""
    from dockerarch import buildsteps
    from dockerarch.build import Job, plan_accel
    from dockerarch.builders import route
    from dockerarch.recipes import PackageSpec

    name = wanted.set_name
    spec = PackageSpec(spec=name, name=name, version="set")
    request = dataclasses.replace(made.request, package=spec, version="set", wheelset=landing)
    routed = route(request.target.platform, forced=options.builder,
                   fallback_qemu=options.fallback_qemu)  # fmt: skip
    decision = plan_accel([request], [routed], options.accel, ccache=options.ccache)[0]
    job = Job(request, options, progress, routed, decision)
    member, image = set_runtime_image(made, wanted, routed.builder) or (None, None)
    if member is not None and image is not None and job.engine.image_labels(image, routed.context):
        tag = buildsteps.image_tag(request, made.target)
        job.engine.tag_image(image, tag, routed.context)
        made.check = str((member.record or {}).get("smoke") or "")
        others = [str(n) for n in (member.record or {}).get("installed_with") or []]  # type: ignore[attr-defined]
        rest = f", with the rest of the set: {len(others)} wheels" if others else ""
        progress.say(made.target, f"set: {image} ({member.key}'s runtime image{rest}) already is "
                     f"the set installed from itself alone: tagged {tag}, not installed again")  # fmt: skip
        (landing / "check.log").write_text(
            f"{member.key} was built in this run and installed into {image} from the set's "
            "wheels alone (no index, no network)"
            + (f", with the rest of the set (its run-time closure: {', '.join(others)}), each "
               "the set's version" if others else "")
            + f"; its libraries were found and its modules imported ({made.check}). Installing "
            f"the set again makes the same image, so {image} is tagged {tag}.\n"
        )  # fmt: skip
        return
    progress.say(made.target, "set: installing it from itself alone, under QEMU")
    work = make_work_dir(landing.parent, "check")
    try:
        job.work = work
        (work / "result").mkdir()
        # written beside the set until the check ends: the set is the builds' `wheelset`
        # context, which a growing log would change between the image's build and its checks
        with (work / "check.log").open("w", buffering=1) as log:
            state = job.new_state(work, log, time.monotonic())
            for step in (
                buildsteps.ensure_base,
                buildsteps.prepare_context,
                buildsteps.toolchain_image,
                buildsteps.runtime_base_image,
            ):
                step(state)
            board: list[ArtifactReport] = []
            for member in made.members.values():
                if member.path is None or not (member.node.runtime or member.node.test):
                    continue
                link_or_copy(member.path, state.landing / member.path.name)
                report = _report(made, member)
                state.reports.append(report)
                if member.node.runtime:
                    board.append(report)
            state.needs_apt = list(made.needs_apt)  # the members' builds found these
            buildsteps.runtime_image(state)
            state.reports = board  # the smoke test imports what the board installs
            buildsteps.smoke_test(state)
            made.check = state.smoke_output
            if state.needs_apt:
                made.needs_apt = sorted(set(made.needs_apt) | set(state.needs_apt))
            if wanted.test_command:
                made.tests = run_tests(state, wanted, log)
    finally:
        if (work / "check.log").is_file():
            shutil.copyfile(work / "check.log", landing / "check.log")
        shutil.rmtree(work, ignore_errors=True)
        job.work = None


def set_runtime_image(made: TargetSet, wanted: SetRequest,
                      builder: str) -> tuple[Member, str] | None:  # fmt: skip
    """The member whose runtime image already is the set installed, and that image's tag: it was
    built in this run by ``builder`` (the one that would check the set), so its runtime image was
    made from this set's wheels alone (no index, no network), and that image holds every board
    wheel of the set (the member's own, and those its checks covered: installed_with, their
    libraries checked, their modules imported, their versions the set's); nothing else goes on
    the board, and no --test asks for more. Installing the set again would make the same image."""
    if wanted.test_command:
        return None
    board = [m for m in made.members.values() if m.node.runtime or m.node.test]
    wheels = {m.path.name for m in board if m.path is not None}
    if len(wheels) != len(board):
        return None
    for member in board:
        record = member.record or {}
        image, route = record.get("image"), record.get("builder")
        if not member.built or member.reused or not member.node.runtime or member.path is None:
            continue
        if not isinstance(image, dict) or not image.get("tag"):
            continue
        if not isinstance(route, dict) or route.get("name") != builder:
            continue
        covered = {member.path.name, *(str(n) for n in record.get("installed_with") or [])}  # type: ignore[attr-defined]
        if wheels <= covered:
            return member, str(image["tag"])
    return None


TEST_TIMEOUT = 3600  # seconds: a user's test suite under QEMU


def run_tests(state: JobState, wanted: SetRequest, log: TextIO) -> str:
    """--test COMMAND in the set's image, the network off, {project} the --test-sources
    directory (read-only); a failure is the build's, with the tests' last lines."""
    assert wanted.test_command and state.image_tag
    sources = (wanted.test_sources or Path.cwd()).resolve()
    command = wanted.test_command.replace("{project}", "/project")
    state.step("tests")
    code, output = state.engine.run_in_image(
        state.image_tag, state.request.target.platform, f"cd /project && {command}",
        state.route.context, TEST_TIMEOUT, network="none", volumes=((str(sources), "/project"),),
    )  # fmt: skip
    log.write(f"### tests: {command}\n{output}\n")
    lines = output.strip().splitlines()
    if code != 0:
        said = (
            f"did not end within {TEST_TIMEOUT} s" if code == 124 else f"failed (exit code {code})"
        )
        raise SetTestFailed(
            f"{state.target}: the tests ({command}) {said} with the set installed in "
            f"{state.image_tag}: " + " / ".join(lines[-8:]),
            fix="The set built and imports, but your tests fail on the target (under QEMU); "
            "the whole output is in the set's check.log beside the build, and nothing replaced "
            "an earlier set.",
        )
    last = lines[-1] if lines else "ok"
    state.say(f"tests passed: {last}")
    return last


__all__ = [
    "Member",
    "SetBuildFailed",
    "SetRequest",
    "SetTestFailed",
    "TargetSet",
    "build_requests",
    "fetch",
    "lock_lines",
    "make_sets",
    "plan",
    "previous_result",
    "set_name",
    "set_requests",
    "sets_of",
    "unpack_sdist",
    "write_set",
]  # fmt: skip
