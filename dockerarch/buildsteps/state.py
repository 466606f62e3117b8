"""A build job's state as its steps share it: the options a build runs with, the engine the steps
talk to (the engine module, or a stand-in in unit tests), what each step leaves for the next,
how a step's engine build is streamed, and the job's rendered context.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO, TypeVar

from dockerarch import (
    accel,
    artifacts,
    builders,
    paths,
    steps,
)
from dockerarch import farm as farm_module
from dockerarch.compilercache import RemoteCache
from dockerarch.config import FarmServer, RegistryConfig
from dockerarch.engine import BuildFailed, BuildSpec, Pulled
from dockerarch.errors import DockerarchError, EngineError
from dockerarch.files import context_name, write_atomic
from dockerarch.machineimages import Sharing
from dockerarch.pipconfig import BuildIndexes
from dockerarch.registry import RemoteImage
from dockerarch.render import RenderRequest, render_dockerfile

T = TypeVar("T")
# the indexes' secret: its id (macros.j2's host_secrets) and its file in the job's directory
INDEX_SECRET = "dockerarch-index"


class Engine(Protocol):
    """What a build job asks of the Docker engine (the ``engine`` module's functions)."""

    def image_labels(
        self, reference: str, context: str | None = None
    ) -> tuple[str, dict[str, str]] | None: ...
    def copy_image(self, reference: str, to_context: str) -> None: ...
    def machine_info(self, context: str | None = None) -> dict[str, str]: ...
    def pull_image(self, reference: str, platform: str) -> Pulled | None: ...
    def remote_image(
        self, registry: RegistryConfig, repository: str, tag: str, platform: str
    ) -> RemoteImage | None: ...
    def push_as(self, tag: str, remote: str) -> str: ...
    def remove_tag(self, reference: str) -> None: ...
    def tag_image(self, reference: str, tag: str, context: str | None = None) -> None: ...
    def build_lines(self, spec: BuildSpec) -> Iterator[str]: ...
    def run_in_image(
        self,
        image: str,
        platform: str,
        command: str,
        context: str | None = None,
        timeout: int | None = None,
        network: str | None = None,
        volumes: tuple[tuple[str, str], ...] = (),
    ) -> tuple[int, str]: ...


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    out: Path
    builder: str | None = None
    fallback_qemu: bool = False
    cache: bool = True
    smoke: bool = True
    ca_bundle: str | None = None
    accel: str = "hybrid"  # or "none": plain emulation (native nodes build natively either way)
    ccache: bool = True  # hybrid builds' compiler cache
    registry_cache: str | None = None  # a repository: build stages pushed there with inline cache
    registry_cache_loopback: bool = True  # the registry is on this machine only
    uses: dict[str, Path] = field(default_factory=dict)  # --use NAME=DIR: a recipe's `uses` given
    farm: tuple[FarmServer, ...] = ()  # compile farm servers (hybrid builds)
    jobs_chosen: bool = False  # --set MAX_JOBS=N: a farm does not raise it
    compiler_cache: RemoteCache | None = None  # the team's shared compiler cache (hybrid builds)
    indexes: BuildIndexes | None = None  # where a recipe's build fetches (None: a wheel set's)
    machine_images: Sharing | None = None  # the team's registry's machine images (None: off)

    @property
    def secrets(self) -> tuple[str, ...]:
        """buildx --secret values: the host's CA bundle, when there is one."""
        return (f"id=ca-bundle,src={self.ca_bundle}",) if self.ca_bundle else ()


@dataclass(frozen=True)
class PendingImage:
    """A machine image being made (or pulled) in a thread of its own while the job goes on: its
    tag, the thread's result, and the log its buildx lines go to (the job's log after it)."""

    tag: str
    done: Future[Any]  # a toolchain image's: the reference the build takes it by
    log: Path
    key: str = ""  # the sha256 of what it is made from
    found: Future[bool] | None = None  # told first: whether it was there or pulled (not made)


def in_background(work: Callable[[], T]) -> Future[T]:
    """``work`` in a thread of its own; its result (or error) is the future's. The thread is
    not a daemon: a build that fails meanwhile still lets it finish (a base or a machine image
    the next build takes)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dockerarch-meanwhile")
    try:
        return pool.submit(work)
    finally:
        pool.shutdown(wait=False)


@dataclass(kw_only=True)
class JobState:
    """What the steps of one target's build share: its inputs, its temporary directory, and what
    each step found for the next."""

    request: RenderRequest  # with the hybrid toolchain decided
    route: builders.Route
    decision: accel.Decision
    options: BuildOptions
    engine: Engine
    work: Path  # the job's temporary directory
    log: TextIO  # build.log, in work/result
    say: Callable[[str], None]
    step: Callable[[str], None]
    count: Callable[[str, int, int, str], None]
    started: float = field(default_factory=time.monotonic)
    contexts: dict[str, str] = field(default_factory=dict)  # named build contexts
    used: dict[str, str] = field(default_factory=dict)  # other results' directories (uses)
    build_args: dict[str, str] = field(default_factory=dict)  # of every buildx invocation
    base_id: str | None = None
    base_pending: Future[tuple[str, dict[str, str]]] | None = None  # bootstrapping meanwhile
    toolchain_base_id: str | None = None  # the amd64 base of a hybrid build's native stages
    toolchain_image: str | None = None  # the image that gives this build its native stages
    toolchain_pending: PendingImage | None = None  # being made or pulled meanwhile
    native_python_pending: PendingImage | None = None  # its lower layers, an image of their own
    # the toolchain image as the build pulls it from the team's registry (REMOTE@DIGEST, its
    # key), until toolchain_landed keeps it here
    toolchain_remote: tuple[str, str] | None = None
    runtime_base_image: str | None = None  # the image its build and runtime stages start from
    pushes: list[Future[None]] = field(default_factory=list)  # machine images being pushed
    cache_ref: str | None = None
    toolchain_log: Path | None = None
    drivers: accel.DriverReport | None = None
    reports: list[artifacts.ArtifactReport] = field(default_factory=list)
    image_tag: str | None = None
    sonames: str = ""  # the build stage's soname<TAB>package table (libneeds.SONAMES_EXPORT)
    needs_apt: list[str] = field(default_factory=list)  # packages the artifacts' libraries need
    image_id: str | None = None
    smoke_output: str | None = None
    hybrid: dict[str, int] | None = None
    emulated_starters: dict[str, int] | None = None  # emulated programs that started compiles
    farm_secret: str | None = None  # buildx --secret of the farm's hosts line, when one is used
    farm: farm_module.Placement | None = None  # where the farm's compiles ran
    timings: list[tuple[str, float]] = field(default_factory=list)
    built_options: dict[str, str] = field(default_factory=dict)  # as the Dockerfile builds them
    source_date_epoch: int | None = None  # the timestamps the build writes into its artifacts

    @property
    def secrets(self) -> tuple[str, ...]:
        """buildx --secret values of this job's steps: the options' (the CA bundle) and, for a
        recipe's build, the indexes it fetches from (INDEX_SECRET, written once, readable by
        this user only). A wheel set's build has none: it fetches on the host."""
        indexes = self.options.indexes
        if indexes is None or self.request.wheelset is not None:
            return self.options.secrets
        path = self.work / INDEX_SECRET
        if not path.exists():
            write_atomic(path, indexes.secret().encode(), mode=0o600)
        return (*self.options.secrets, f"id={INDEX_SECRET},src={path}")

    @property
    def allow(self) -> tuple[str, ...]:
        """buildx entitlements of this job's steps: the host's network, for a compile farm or
        the shared compiler cache on loopback (compile_network) or an index there."""
        toolchain = self.request.toolchain
        host = (
            (toolchain is not None and bool(toolchain.compile_network))
            or self.request.fetch_network
            or bool(self.request.farm_network)  # a native build's farm on loopback
        )
        return ("network.host",) if host else ()

    @property
    def landing(self) -> Path:
        """The result as it is made: artifacts, build.log, manifest.json."""
        return self.work / "result"

    @property
    def context(self) -> Path:
        return self.work / context_name("context", self.work)

    @property
    def target(self) -> str:
        return self.request.target.name


class BuildStepFailed(EngineError):
    exit_code = 6

    def __init__(self, target: str, step: str, tail: list[str]) -> None:
        super().__init__(f"{target}: the build failed at {step}")
        self.step = step
        self.tail = tail


class BuildStopped(EngineError):
    """buildx ended with no step failing: it was killed, or lost its engine."""

    exit_code = 6

    def __init__(self, target: str, doing: str, code: int | None) -> None:
        how = (
            f"was killed (signal {-code})" if code is not None and code < 0
            else f"ended with exit code {code}" if code is not None else "ended"
        )  # fmt: skip
        super().__init__(
            f"{target}: docker buildx {how} while {doing}, with no build step failing",
            fix="Run the same command again: finished steps are cached and compiled objects are "
            "in the compiler cache, so the build continues where it stopped.",
        )


class NodeLost(EngineError):
    """The builder node stopped answering mid-build (its network, its power)."""

    exit_code = 6


def _node_lost(job: JobState, doing: str, code: int | None = None,
               said: str = "") -> NodeLost | None:  # fmt: skip
    """A NodeLost naming the node when buildx, building on one, ended with no step failing: the
    node no longer answers (its power, its network), or it answers but buildx's connection to it
    broke (exit code > 0, not a signal: the link dropped; buildx's last words in ``said``). None
    for a local build, or a buildx stopped by a signal (the user's Ctrl-C: BuildStopped)."""
    from dockerarch import builders

    route = job.route
    if route.context is None:
        return None
    node = builders.Node(name=route.builder, endpoint=route.endpoint, platforms=())
    why = builders.answers(node)
    if why is None:
        if code is None or code <= 0 or "context canceled" in said:  # stopped, or cancelled
            return None
        told = f": {said.strip()[:300]}" if said.strip() else ""
        return NodeLost(
            f"{job.target}: the connection to builder node '{route.builder}' ({route.endpoint}) "
            f"dropped while {doing} (the node answers again now){told}",
            fix="Run the same command again: the steps the node finished are in its cache, so "
            "the build continues there; if the link keeps dropping, build here instead: "
            "--builder local.",
        )
    return NodeLost(
        f"{job.target}: builder node '{route.builder}' ({route.endpoint}) stopped answering "
        f"while {doing}: {why}",
        fix="Bring the node back (its power, its network) and run the same command again: the "
        "steps it finished are in its cache, so the build continues there; or build here "
        "instead: --builder local.",
    )


NO_SPACE = "no space left on device"  # ENOSPC, as BuildKit prints it; apt: "(28: No space ...)"


def out_of_space(text: str) -> bool:
    """Whether ``text`` (a failing step's lines, an engine's error) says ENOSPC."""
    return NO_SPACE in text.lower()


# BuildKit lost buildx's session (the connection to a node stalled or dropped) before it could
# hand the result over; the node still answers, its finished steps are in its cache
NO_SESSION = "no active session for"


def _session_lost(job: JobState, doing: str) -> NodeLost:
    route = job.route
    return NodeLost(
        f"{job.target}: the connection to builder node '{route.builder}' ({route.endpoint}) was "
        f"lost at {doing}: its BuildKit no longer had this build's session",
        fix="Run the same command again: the steps the node finished are in its cache, so it "
        "hands the result over without compiling again.",
    )


class DiskFull(EngineError):
    """The engine that builds ran out of disk."""

    exit_code = 6


def disk_full(job: JobState, doing: str) -> DiskFull:
    """The engine that builds (a node's, or this machine's) ran out of disk at ``doing``."""
    route = job.route
    where = (f"builder node '{route.builder}' ({route.endpoint})" if route.context is not None
             else "this machine's Docker engine")  # fmt: skip
    prune = (f"on the node: docker builder prune; docker image prune (or forget the node: "
             f"dockerarch builder rm {route.builder})" if route.context is not None
             else "dockerarch prune (machine images), docker builder prune (BuildKit's cache)")  # fmt: skip
    return DiskFull(
        f"{job.target}: {where} ran out of disk ({NO_SPACE}) at {doing}",
        fix=f"Free space where the engine keeps its data ({prune}), then run the same command "
        "again: the steps that finished are cached.",
    )


class SmokeFailed(DockerarchError):
    exit_code = 8


def stream(
    job: JobState, spec: BuildSpec, first: str, watch: Callable[[str], None] | None = None
) -> None:
    """One buildx invocation, its lines to the log (and each to ``watch``); ``first`` is said
    until a step works."""
    job.step(first)
    args = {**job.build_args, **(spec.build_args or {})}
    if job.source_date_epoch is not None:  # every invocation the same, or none share a cache
        args["SOURCE_DATE_EPOCH"] = str(job.source_date_epoch)
    if args:
        spec = dataclasses.replace(spec, build_args=args)
    tracker = steps.StepTracker()
    subject = job.request.result_name.rsplit("-", 1)[0]
    job.log.write(f"### buildx: stage {spec.stage} for {spec.platform}\n")
    started = time.monotonic()
    clipped = False
    last = ""  # buildx's own last line (not a step's): why it ended, when no step failed
    try:
        for chunk in job.engine.build_lines(spec):
            for line in chunk.splitlines():
                job.log.write(line + "\n")
                if watch is not None:
                    watch(line)
                if line.strip() and not line.startswith("#"):
                    last = line
                if tracker.feed(line):
                    job.step(steps.describe(tracker.current, subject=subject))
                elif (count := tracker.count(line)) is not None:
                    job.count(steps.describe(tracker.current, subject=subject), *count)
                elif steps.CLIPPED.search(line) and not clipped:
                    clipped = True
                    job.say(steps.CLIPPED_NOTE)
    except BuildFailed as exc:
        job.log.flush()
        if tracker.failed is None:  # no step failed: buildx itself was stopped
            doing = steps.describe(tracker.current, subject=subject)
            lost = _node_lost(job, doing, exc.return_code, last)
            if lost is not None:
                raise lost from exc
            raise BuildStopped(job.target, doing, exc.return_code) from exc
        title, tail = tracker.failure_report()
        if any(out_of_space(line) for line in tail[-40:]):
            raise disk_full(job, title) from exc
        if job.route.context is not None and any(NO_SESSION in line for line in tail[-5:]):
            raise _session_lost(job, title) from exc
        raise BuildStepFailed(job.target, title, tail) from exc
    # Wall-clock time of the invocation: BuildKit's own DONE times include replays.
    job.log.write(f"### buildx: stage {spec.stage} took {time.monotonic() - started:.1f} s\n")


def write_context(request: RenderRequest, context: Path) -> dict[str, str]:
    """The recipe's context directory plus the rendered Dockerfile; the options it builds with."""
    if request.recipe.context.is_dir():
        shutil.copytree(request.recipe.context, context, symlinks=True)
    else:
        context.mkdir()
    if request.package is not None and request.package.local is not None:
        ignore = shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", "__pycache__", ".venv"
        )
        shutil.copytree(request.package.local, context / "src", symlinks=True, ignore=ignore)
    if request.toolchain is not None:
        accel.prepare_context(context)
    return write_dockerfile(request, context)


def write_dockerfile(request: RenderRequest, context: Path) -> dict[str, str]:
    """The request's Dockerfile rendered into ``context``; the options it builds with."""
    rendered = render_dockerfile(request, paths.template_dirs())
    (context / "Dockerfile").write_text(rendered.text)
    return rendered.options
