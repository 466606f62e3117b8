"""The steps of a build job, in order: each a small function of the job's state.

A job (build.Job) makes a temporary directory beside its result and runs :data:`STEPS` on a
:class:`JobState`; each step is timed, and the times go to manifest.json. The steps talk to the
Docker engine only through :class:`Engine` (the ``engine`` module in a real build, a fake in unit
tests), and to the user only through the state's progress callbacks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from dockerarch import (
    __version__,
    accel,
    artifacts,
    builders,
    compilercache,
    libneeds,
    machineimages,
    paths,
    steps,
)
from dockerarch import farm as farm_module
from dockerarch.artifacts import VerificationError
from dockerarch.compilercache import RemoteCache
from dockerarch.config import FarmServer
from dockerarch.engine import BuildFailed, BuildSpec
from dockerarch.errors import DockerarchError, EngineError, UsageError
from dockerarch.files import context_name, linked_view
from dockerarch.render import RenderRequest, render_dockerfile

if TYPE_CHECKING:
    from dockerarch.base import BaseRequest


class Engine(Protocol):
    """What a build job asks of the Docker engine (the ``engine`` module's functions)."""

    def image_labels(
        self, reference: str, context: str | None = None
    ) -> tuple[str, dict[str, str]] | None: ...
    def copy_image(self, reference: str, to_context: str) -> None: ...
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

    @property
    def secrets(self) -> tuple[str, ...]:
        """buildx --secret values: the host's CA bundle, when there is one."""
        return (f"id=ca-bundle,src={self.ca_bundle}",) if self.ca_bundle else ()


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
    runtime_base_image: str | None = None  # the image its build and runtime stages start from
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
    def landing(self) -> Path:
        """The result as it is made: artifacts, build.log, manifest.json."""
        return self.work / "result"

    @property
    def context(self) -> Path:
        return self.work / context_name("context", self.work)

    @property
    def target(self) -> str:
        return self.request.target.name


# --- the steps -------------------------------------------------------------------------------


def ensure_base(job: JobState) -> None:
    """The target's base image (bootstrapped when missing and dockerarch can), on the node that
    builds; in a hybrid build the amd64 base of the native toolchain too. A hybrid build on this
    machine whose target base is missing bootstraps it in the background: the toolchain image
    needs only the amd64 base, so it is made meanwhile, and "base ready" waits for the target's."""
    request, route = job.request, job.route
    if route.note:
        job.say(route.note)
    job.say(f"building on {route.builder} ({job.decision.accel}, {route.endpoint})")
    tag = request.target.base_image
    if (request.toolchain is not None and route.context is None
            and job.engine.image_labels(tag) is None):  # fmt: skip
        name = request.target.name
        made_from = _bootstrap_request(name, tag)  # one it cannot make is said now, not later
        job.base_pending = _in_background(lambda: _local_base(job, name, tag, made_from))
    else:
        _take_base(job, *_local_base(job, request.target.name, tag))
    if request.toolchain is not None:
        job.toolchain_base_id, _ = _local_base(
            job, request.toolchain.base_target, request.toolchain.base_image
        )


def base_ready(job: JobState) -> None:
    """The target's base, when ensure_base left it bootstrapping: waited for here, before the
    first step that starts from it."""
    pending, job.base_pending = job.base_pending, None
    if pending is None:
        return
    if not pending.done():
        job.step(f"waiting for the base {job.request.target.base_image} (bootstrapping)")
    _take_base(job, *pending.result())


def _take_base(job: JobState, base_id: str, labels: dict[str, str]) -> None:
    """The target's base found: its id, the artifacts' date, and a remote node's copy of it."""
    job.base_id = base_id
    job.source_date_epoch = source_date_epoch(labels)
    route, tag = job.route, job.request.target.base_image
    if route.context is not None:
        remote = job.engine.image_labels(tag, route.context)
        if remote is None or remote[0] != base_id:
            job.say(f"copying the base {tag} to node {route.builder}")
            job.engine.copy_image(tag, route.context)


def _in_background(
    work: Callable[[], tuple[str, dict[str, str]]],
) -> Future[tuple[str, dict[str, str]]]:
    """``work`` in a thread of its own; its result (or error) is the future's. The thread is
    not a daemon: a build that fails meanwhile still lets a bootstrap finish (the next build
    takes the base)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dockerarch-base")
    try:
        return pool.submit(work)
    finally:
        pool.shutdown(wait=False)


def source_date_epoch(base_labels: dict[str, str]) -> int | None:
    """SOURCE_DATE_EPOCH for the build's artifacts (wheels' file dates, __DATE__, .debs): the one
    dockerarch runs with, else the base's own (its archive's Release date), so that the same
    sources on the same base build to the same bytes. None: neither is known (a base imported
    from an SD card without SOURCE_DATE_EPOCH), and the tools write today's date."""
    given = os.environ.get("SOURCE_DATE_EPOCH")
    if given is not None:
        if not given.isdigit() or int(given) < 315532800:
            raise UsageError(
                f"SOURCE_DATE_EPOCH={given!r} is not a time dockerarch can build with",
                fix="Give seconds since 1970 from 1980 on (zip files cannot hold earlier "
                "dates): SOURCE_DATE_EPOCH=$(git log -1 --format=%ct), or unset it to use the "
                "base's date.",
            )
        return int(given)
    from dockerarch.base import LABEL_PREFIX

    label = base_labels.get(f"{LABEL_PREFIX}.source-date-epoch", "")
    return int(label) if label.isdigit() else None


def prepare_context(job: JobState) -> None:
    """The build context (the recipe's directory, the rendered Dockerfile, the hybrid
    toolchain's helpers), the named context of a --source, and the named contexts taken from
    other results (``uses``) as views of this build's own (files.linked_view)."""
    job.built_options = write_context(job.request, job.context)
    for name in job.request.recipe.uses:  # other results' directories (torch's for torchvision)
        if name in job.contexts:
            job.used[name] = job.contexts[name]
            view = linked_view(Path(job.contexts[name]), job.work / context_name(name, job.work))
            job.contexts[name] = str(view)
    source = job.request.source
    if source is not None:
        from dockerarch.sources import context_dir

        job.contexts["source"] = str(context_dir(source, job.work))
        job.say(f"source: {source.path}"
                + (f" (commit {source.commit[:12]})" if source.commit else ""))  # fmt: skip
    job.cache_ref = _registry_cache_ref(job)
    remote = job.options.compiler_cache
    if remote is not None and job.request.toolchain is not None and job.request.toolchain.ccache:
        storage = remote.storage(own_code=job.request.own_code)
        if storage is None:
            job.say("compiler cache: not your own code (fetched from an index) and no reader's "
                    "credential here (DOCKERARCH_CACHE_READER_USERNAME/PASSWORD): this build "
                    "compiles with this machine's cache only")  # fmt: skip
            return
        if not job.request.own_code and not remote.config.read_only and "|read-only" in storage:
            job.say("compiler cache: read only for this build (not your own code: it never "
                    "gets the writer's credential)")  # fmt: skip
        # the server's URL with its credentials: only ever this file (0600), a build secret
        fd = os.open(job.work / CACHE_SECRET, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(storage + "\n")


_IMAGE_LOCKS: dict[str, threading.Lock] = {}  # one build of each machine image at a time


def _machine_image(job: JobState, tag: str, platform: str, stage: str, what: str,
                   shared: str) -> None:  # fmt: skip
    """Build ``stage`` of the job's Dockerfile into the engine as ``tag``, unless it is there
    (one build of a tag at a time: a set's members may ask for it together)."""
    with _IMAGE_LOCKS.setdefault(tag, threading.Lock()):
        if job.engine.image_labels(tag) is None:
            spec = BuildSpec(context_dir=job.context, platform=platform, stage=stage,
                             load_tag=tag, secrets=job.options.secrets, cache=job.options.cache,
                             build_contexts=job.contexts)  # fmt: skip
            began = time.monotonic()
            stream(job, spec, f"{what} (once per machine)")
            job.say(f"{what} {tag} made in {time.monotonic() - began:.0f} s: builds that need "
                    f"{shared} start from it")  # fmt: skip
    machineimages.record_use(tag)  # what dockerarch prune reads: used, so kept


def toolchain_image(job: JobState) -> None:
    """A hybrid build's native stages (the x86-64 Python, the cross toolchain, uv, the native
    drivers) come from an image of this machine's, tagged with the sha256 of everything they are
    made from (accel.toolchain_key): built once, like a base, then given to every build that
    needs the same in place of those stages. A cold build (--no-cache) rebuilds the package, not
    the compilers: with the key, a changed package list, driver or script is a new image."""
    toolchain = job.request.toolchain
    if toolchain is None or job.route.context is not None or job.toolchain_base_id is None:
        return  # a remote node builds its stages itself
    dockerfile = (job.context / "Dockerfile").read_text()
    key = accel.toolchain_key(dockerfile, job.context, job.toolchain_base_id)
    tag = f"dockerarch/toolchain:{toolchain.triplet}-gcc{toolchain.gcc}-{key[:16]}"
    _machine_image(job, tag, "linux/amd64", accel.NATIVE_STAGES[-1], "toolchain image",
                   "the same toolchain")  # fmt: skip
    job.toolchain_image = tag
    job.build_args.update(dict.fromkeys(accel.NATIVE_STAGE_ARGS, tag))


def runtime_base_image(job: JobState) -> None:
    """What the build and the runtime image start from, the target's base plus the packages the
    artifacts need at run time (python3 and pip for a wheel, a recipe's runtime_apt), comes from
    an image of this machine's tagged with the sha256 of what it is made from
    (accel.runtime_base_key): made by the first build that needs it, then given to every build
    of the same packages on the same base, cold ones included. Under QEMU its dpkg and maintainer
    scripts are most of a small build's runtime image (12.5 s of Brotli's for armv7). A new base
    (re-bootstrapped), package list or apt script is a new image; a stage with nothing to install
    and a build on a remote node build it in place, and so does a build with the registry's
    cache: its steps are keyed from the base any machine can have, where an image of this
    machine's (its own layers) would give every later step a key no other machine shares."""
    request = job.request
    if job.route.context is not None or job.base_id is None:
        return
    if job.cache_ref is not None:
        job.say("runtime base built in place: with the registry's cache, the steps after it "
                "are keyed from the base, as on every machine that shares the cache")  # fmt: skip
        return
    dockerfile = (job.context / "Dockerfile").read_text()
    if "\nRUN " not in accel.stage_text(dockerfile, accel.RUNTIME_BASE_STAGE):
        return
    key = accel.runtime_base_key(dockerfile, job.context, job.base_id, job.toolchain_base_id)
    tag = f"dockerarch/runtime-base:{request.target.name}-{key[:16]}"
    _machine_image(job, tag, request.target.platform, accel.RUNTIME_BASE_STAGE,
                   "runtime base image", "the same packages on this base")  # fmt: skip
    job.runtime_base_image = tag
    job.build_args[accel.RUNTIME_BASE_ARG] = tag


def use_farm(job: JobState) -> None:
    """--farm: this build's own toolchain stage (amd64, cached from the build) compiles a probe
    on each server alone; those that answer with the same toolchain take compiles, through a
    hosts line given to the compiling steps as a secret. A server left out is said."""
    servers = job.options.farm
    toolchain = job.request.toolchain
    if not servers:
        return
    if toolchain is None:
        job.say("farm not used: this build has no hybrid toolchain (plain QEMU or native)")
        return
    if job.route.context is not None:
        job.say(f"farm not used: the build runs on node '{job.route.builder}'")
        return
    tag = job.toolchain_image
    if tag is None:  # the stage's own, built for the probe
        tag = re.sub(r"[^a-z0-9_./:-]", "-", f"dockerarch/toolchain:{job.target}".lower())
        spec = BuildSpec(context_dir=job.context, platform="linux/amd64",
                         stage="toolchain", load_tag=tag, secrets=job.options.secrets,
                         cache=job.options.cache, build_contexts=job.contexts)  # fmt: skip
        stream(job, spec, "toolchain for the farm")
    loopback = any(s.loopback for s in servers)
    code, output = job.engine.run_in_image(
        tag, "linux/amd64", farm_module.probe_command(servers, toolchain.triplet),
        timeout=180, network="host" if loopback else None,
    )  # fmt: skip
    job.log.write(f"### farm probe (exit code {code})\n{output}\n")
    probe = farm_module.read_probe(servers, output, job.target)
    if not probe.digest:
        raise EngineError(
            f"Probing the farm with {tag} failed (exit code {code}): {output.strip()[-300:]}",
            fix="Run again with --debug; build without --farm meanwhile.",
        )
    farm_module.say_refused(probe, job.say)
    if not probe.usable:
        job.say("warning: no farm server can take this build's compiles: compiling on this "
                "machine only")  # fmt: skip
        return
    hosts = job.work / "farm-hosts"
    cores = os.cpu_count() or 2
    hosts.write_text(farm_module.hosts_line(probe.usable, local_slots=cores) + "\n")
    job.farm_secret = f"id=dockerarch-farm,src={hosts}"
    job.say(f"farm: {', '.join(s.address for s in probe.usable)} and this machine take the "
            f"compiles (toolchain sha256:{probe.digest[:16]})")  # fmt: skip
    # Only now, with the farm in use, are more compiles run at once: the Dockerfile is rendered
    # again with MAX_JOBS for this machine's cores and the usable servers' slots. MAX_JOBS is in
    # the layer cache's key (the build drivers read it), so a farm build does not reuse a local
    # build's compile step; its compiles are ccache hits all the same (ccache's key has no -j).
    raised = farm_module.with_farm_jobs(job.request, probe.usable, cores,
                                        fixed=job.options.jobs_chosen)  # fmt: skip
    if raised is not job.request:
        job.request = raised
        job.built_options = write_dockerfile(raised, job.context)
        job.say(f"farm: {farm_module.JOBS_OPTION}={raised.options[farm_module.JOBS_OPTION]} "
                f"(this machine's cores and the usable servers' slots; --set "
                f"{farm_module.JOBS_OPTION}=N to choose)")  # fmt: skip


CACHE_SECRET = "ccache-remote"  # in the job's directory: the shared compiler cache's secret


def _compile_secrets(job: JobState) -> tuple[str, ...]:
    secrets = job.options.secrets + ((job.farm_secret,) if job.farm_secret else ())
    path = job.work / CACHE_SECRET
    if path.exists():  # written by prepare_context when the shared compiler cache is used
        secrets += (f"id={compilercache.SECRET_ID},src={path}",)
    return secrets


def _entitlements(job: JobState) -> tuple[str, ...]:
    toolchain = job.request.toolchain
    return ("network.host",) if toolchain is not None and toolchain.compile_network else ()


def build_artifacts(job: JobState) -> None:
    """One buildx invocation exports the artifacts and, in a hybrid build, the compiler-run log
    beside them (a second one would resolve the build stage again: seen re-running the toolchain
    stage, 40-50 s, when two targets built at once)."""
    hybrid = job.request.toolchain is not None
    cache_from = (
        (f"type=registry,ref={job.cache_ref}",) if job.cache_ref and job.options.cache else ()
    )
    spec = BuildSpec(
        context_dir=job.context, platform=job.request.target.platform,
        stage=accel.LOG_STAGE if hybrid else "artifacts", output_dir=job.landing,
        secrets=_compile_secrets(job), cache=job.options.cache, cache_from=cache_from,
        node_context=job.route.context, build_contexts=job.contexts, allow=_entitlements(job),
    )  # fmt: skip
    stream(job, spec, "starting buildx")
    sonames = job.landing / libneeds.SONAMES_EXPORT
    if sonames.is_file():  # the build stage's library table, out of the artifacts
        job.sonames = sonames.read_text(errors="replace")
        sonames.unlink()
    toolchain = job.request.toolchain
    if toolchain is None:
        return
    job.toolchain_log = job.work / "toolchain.log"  # the compiler-run log, out of the artifacts
    os.replace(job.landing / accel.LOG_EXPORT, job.toolchain_log)
    os.replace(job.landing / accel.CCACHE_EXPORT, job.work / "ccache.log")
    placed = job.landing / accel.FARM_EXPORT
    if placed.is_file():  # where the farm's compiles ran (said when this build used a farm)
        text = placed.read_text(errors="replace")
        placed.unlink()
        if job.farm_secret:
            job.farm = farm_module.Placement.parse(text)
            for line in job.farm.lines():
                job.say(line)
    if toolchain.drivers:  # and what use-native-drivers did
        exported = job.landing / accel.DRIVERS_EXPORT
        job.drivers = accel.DriverReport.parse(exported.read_text(errors="replace"))
        exported.unlink()
        for line in job.drivers.lines():
            job.say(line)
    job.hybrid, job.emulated_starters = _hybrid_counts(job, job.toolchain_log)


def verify(job: JobState) -> None:
    """Every exported file checked against the target (artifacts.verify_all)."""
    job.reports = artifacts.verify_all(
        job.landing, job.request.target, what=f"{job.request.result_name} for {job.target}",
        recipe=job.request.recipe.name, skip=("build.log",),
    )  # fmt: skip
    for report in job.reports:
        glibc = f", needs GLIBC_{report.glibc}" if report.glibc else ""
        job.say(f"verified {report.name} ({report.elf_files} ELF files{glibc})")


def push_cache(job: JobState) -> None:
    """registry.yaml's build cache: the build stage with its inline cache, so later builds
    anywhere that reach the registry reuse its steps. A cache that cannot be pushed does not fail
    the build."""
    if not job.cache_ref:
        return
    spec = BuildSpec(context_dir=job.context, platform=job.request.target.platform, stage="build",
                     push_tag=job.cache_ref, cache_to="type=inline", secrets=_compile_secrets(job),
                     cache=True, node_context=job.route.context, build_contexts=job.contexts,
                     allow=_entitlements(job))  # fmt: skip
    try:
        stream(job, spec, "pushing the registry cache")
    except EngineError as exc:
        why = (getattr(exc, "tail", None) or [exc.problem])[-1].strip()
        job.say(f"registry cache not pushed ({why}); the build goes on without it")
    else:
        job.say(f"registry cache pushed: {job.cache_ref}")


def image_tag(request: RenderRequest, target: str) -> str:
    """The runtime image's tag: dockerarch/<name>:<version>-<target>."""
    tag = f"dockerarch/{request.result_name.rsplit('-', 1)[0]}:{request.version}-{target}"
    return re.sub(r"[^a-z0-9_./:-]", "-", tag.lower())


def runtime_image(job: JobState) -> None:
    """The runtime stage from exactly the verified files (the named context `artifacts` in place
    of the stage: nothing of the build stage is resolved again), loaded into the engine."""
    if not job.options.smoke or job.request.wheel_only:
        return
    request = job.request
    job.image_tag = image_tag(request, job.target)
    verified = _verified_copy(job.landing, job.reports, job.work)
    known = _runtime_packages(job)
    spec = BuildSpec(
        context_dir=job.context, platform=request.target.platform, stage="runtime",
        load_tag=job.image_tag, secrets=job.options.secrets, cache=True,
        node_context=job.route.context, build_contexts={**job.contexts, "artifacts": str(verified)},
        build_args={"DOCKERARCH_NEEDS": " ".join(known)} if known else None,
    )  # fmt: skip
    if request.runtime_needs:
        job.say(f"runtime image: with {' '.join(request.runtime_needs)}, which the set's wheels "
                "installed with it need")  # fmt: skip
    stream(job, spec, "runtime image")
    missing = _missing_libraries(job, spec)
    if missing:
        job.needs_apt = libneeds.packages_for(missing, job.sonames, job.target)
        sonames = ", ".join(sorted({m.soname for m in missing}))
        job.say(f"the artifacts need {sonames}, which the base lacks: installing "
                f"{' '.join(job.needs_apt)} in the runtime image")  # fmt: skip
        known = _runtime_packages(job)
        spec = dataclasses.replace(spec, build_args={"DOCKERARCH_NEEDS": " ".join(known)})
        stream(job, spec, "runtime image")
        still = _missing_libraries(job, spec)
        if still:
            raise VerificationError(
                f"{still[0].path} still cannot find {still[0].soname} in {job.image_tag} after "
                f"installing {' '.join(known)}",
                fix="See build.log; the package that shipped it in the build stage does not put "
                "it where the loader looks at run time.",
            )
    if known:
        job.say(f"on a board: apt install {' '.join(known)}")
    found = job.engine.image_labels(job.image_tag, job.route.context)
    job.image_id = found[0] if found else None


def _runtime_packages(job: JobState) -> list[str]:
    """The target's packages the runtime image installs before the artifacts: those the set's
    wheels installed with them need (their builds found them), and the artifacts' own."""
    return sorted({*job.request.runtime_needs, *job.needs_apt})


def _missing_libraries(job: JobState, runtime: BuildSpec) -> list[libneeds.Missing]:
    """Every needed library of the installed artifacts that the target's loader does not find
    in the runtime image: read natively in a hybrid build (``runtime``'s image, the `needs`
    stage), else, or when that reading cannot answer, by the target's ldd under QEMU."""
    if job.request.toolchain is not None:
        found = _missing_natively(job, runtime)
        if found is not None:
            return found
    command = libneeds.check_command(installed(job))
    if command is None or job.image_tag is None:
        return []
    code, output = job.engine.run_in_image(
        job.image_tag, job.request.target.platform, command, job.route.context, SMOKE_TIMEOUT
    )
    job.log.write(f"### shared libraries: {command}\n{output}\n")
    if code != 0:
        raise SmokeFailed(
            f"{job.target}: checking the artifacts' shared libraries in {job.image_tag} failed "
            f"(exit code {code}): " + " / ".join(output.strip().splitlines()[-3:]),
            fix="See build.log.",
        )
    return libneeds.parse(output, installed(job))


def _missing_natively(job: JobState, runtime: BuildSpec) -> list[libneeds.Missing] | None:
    """The check of _missing_libraries by the x86-64 Python over the runtime image's files (the
    layout's `needs` stage, FROM the runtime stage just built: its steps come from the cache);
    None when that reading cannot answer for these files."""
    files = libneeds.native_files(installed(job))
    if files is None:
        return []
    work = Path(tempfile.mkdtemp(prefix="needs-", dir=job.work))
    listed = work / context_name("files", work)
    listed.mkdir()
    (listed / "files.json").write_text(files)
    spec = dataclasses.replace(
        runtime, stage="needs", load_tag=None, output_dir=work / "out",
        build_contexts={**(runtime.build_contexts or {}), "needs-files": str(listed)},
    )  # fmt: skip
    started = time.monotonic()
    stream(job, spec, "shared libraries")
    output = (work / "out" / "dockerarch-needs.txt").read_text(errors="replace")
    job.log.write(f"### shared libraries, read natively in {job.image_tag} "
                  f"({time.monotonic() - started:.1f} s):\n{files}{output}\n")  # fmt: skip
    why = libneeds.undecided(output)
    if why is not None:
        job.say(f"the artifacts' libraries cannot be read natively ({why}): asking the "
                "target's ldd")  # fmt: skip
        return None
    return libneeds.parse(output, installed(job))


def installed(job: JobState) -> list[artifacts.ArtifactReport]:
    """What the runtime image's checks cover: the artifacts, and the wheels a wheel set's member
    installs with them (RenderRequest.installed_with: the rest of the set)."""
    return [*job.reports, *job.request.installed_with]


def smoke_test(job: JobState) -> None:
    """The recipe's smoke command (a wheel's: import its top-level modules) in the runtime image,
    under QEMU."""
    if job.image_tag is None:
        return
    command = smoke_command(job.request, installed(job))
    if command is None:
        job.smoke_output = "nothing to import"
        return
    job.step("smoke test")
    code, output = job.engine.run_in_image(
        job.image_tag, job.request.target.platform, command, job.route.context, SMOKE_TIMEOUT
    )
    job.log.write(f"### smoke test: {command}\n{output}\n")
    if code == 124:
        raise SmokeFailed(
            f"{job.target}: the smoke test did not end within {SMOKE_TIMEOUT} s in {job.image_tag}: "
            + " / ".join(output.strip().splitlines()[-3:]),
            fix="A smoke test that hangs under QEMU is a failure too; see build.log for what it "
            "printed. --no-smoke skips the test.",
        )
    if code != 0:
        raise SmokeFailed(
            f"{job.target}: the smoke test failed in {job.image_tag} (exit code {code}): "
            + " / ".join(output.strip().splitlines()[-5:]),
            fix="The artifacts built and verified but do not work installed; see build.log. "
            "--no-smoke skips the test.",
        )
    if job.request.installed_with and not job.request.recipe.smoke:  # smoke_command's own script
        _same_versions(job, output)
    job.smoke_output = output.strip().splitlines()[-1] if output.strip() else "ok"
    job.say(f"smoke test passed: {job.smoke_output}")


_VERSION_MARK = "dockerarch-version:"


def _same_versions(job: JobState, output: str) -> None:
    """A wheel set's member whose image holds the whole set: every wheel of it is the version
    installed there (pip took them from the set's directory, which also holds the build
    environment's wheels: another version of one would make the image not the set)."""
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    found: dict[str, str] = {}
    for line in output.splitlines():
        if line.startswith(_VERSION_MARK):
            said, _, there = line.removeprefix(_VERSION_MARK).strip().partition(" ")
            found[canonicalize_name(said)] = there
    for report in installed(job):
        name, wanted, _, _ = parse_wheel_filename(report.name)
        version = found.get(name)
        try:
            same = version is not None and Version(version) == wanted
        except InvalidVersion:
            same = False
        if not same:
            raise SmokeFailed(
                f"{job.target}: {job.image_tag} holds {name} {version or '(not installed)'}, "
                f"where the set's wheel is {report.name}: the image is not the set installed",
                fix="The set's directory also holds another version of it (a build "
                "requirement's), which pip installed instead; nothing was written as the set. "
                "See build.log, and pin the version in the requirements (-c) meanwhile.",
            )


def write_manifest(job: JobState) -> None:
    """manifest.json: what was built, from what, where, how, and how long each step took."""
    request = job.request
    manifest = {
        "recipe": request.recipe.name,
        "version": request.version,
        "package": request.package.spec if request.package else None,
        "source": request.source.record() if request.source else None,
        "uses": {**{k: v for k, v in job.contexts.items() if k != "source"}, **job.used} or None,
        "toolchain_image": job.toolchain_image,
        "runtime_base_image": job.runtime_base_image,
        "options": job.built_options or request.built_options,
        "target": job.target,
        "platform": request.target.platform,
        "base": {"image": request.target.base_image, "id": job.base_id},
        "source_date_epoch": job.source_date_epoch,
        "image": {"tag": job.image_tag, "id": job.image_id},
        "artifacts": [r.as_dict() for r in job.reports],
        # a wheel set's other wheels its runtime image installed, and its checks covered
        "installed_with": [r.name for r in request.installed_with] or None,
        # the target's packages its runtime image installed for the set's wheels it installs
        # with (their builds found them): on a board, they come with those wheels' needs_apt
        "runtime_needs": list(request.runtime_needs) or None,
        "builder": {"name": job.route.builder, "endpoint": job.route.endpoint},
        "accel": job.decision.accel,
        "hybrid": job.hybrid,
        "emulated_starters": job.emulated_starters,
        "farm": job.farm.as_dict() if job.farm else None,
        "drivers": job.drivers.as_dict() if job.drivers else None,
        "needs_apt": job.needs_apt,
        "smoke": job.smoke_output,
        "steps": [{"step": name, "seconds": round(s, 1)} for name, s in job.timings],
        "seconds": round(time.monotonic() - job.started, 1),
        "dockerarch": __version__,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (job.landing / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


SMOKE_TIMEOUT = 1800  # seconds: torch's smoke test takes about 5 minutes under QEMU

STEPS: tuple[tuple[str, Callable[[JobState], None]], ...] = (
    ("ensure base", ensure_base),
    ("prepare context", prepare_context),
    ("toolchain image", toolchain_image),
    ("base ready", base_ready),
    ("runtime base image", runtime_base_image),
    ("farm", use_farm),
    ("build artifacts", build_artifacts),
    ("verify", verify),
    ("push cache", push_cache),
    ("runtime image", runtime_image),
    ("smoke test", smoke_test),
    ("manifest", write_manifest),
)


# --- what the steps share --------------------------------------------------------------------


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


class SmokeFailed(DockerarchError):
    exit_code = 8


def stream(job: JobState, spec: BuildSpec, first: str) -> None:
    """One buildx invocation, its lines to the log; ``first`` is said until a step works."""
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
    try:
        for chunk in job.engine.build_lines(spec):
            for line in chunk.splitlines():
                job.log.write(line + "\n")
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
            raise BuildStopped(
                job.target, steps.describe(tracker.current, subject=subject), exc.return_code
            ) from exc
        title, tail = tracker.failure_report()
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


def smoke_command(request: RenderRequest, reports: list[artifacts.ArtifactReport]) -> str | None:
    """The recipe's smoke command as a shell line; for a recipe without one, importing the
    artifacts' top-level modules (None: nothing to import)."""
    command = shlex.join(request.recipe.smoke)  # the recipe gives an argv
    if command:
        return command
    modules = sorted({m for r in reports for m in r.top_level})
    if not modules:
        return None
    if not request.installed_with:
        return f"python3 -c 'import {', '.join(modules)}; print(\"imported {' '.join(modules)}\")'"
    # a wheel set's image (the whole set installed): the versions it holds, said before the
    # imports' line (smoke_test compares them with the set's wheels)
    names = sorted({r.name.split("-", 1)[0] for r in reports if r.name.endswith(".whl")})
    script = (
        f"import {', '.join(modules)}\n"
        "from importlib.metadata import version\n"
        f"for name in {json.dumps(names)}:\n"
        f'    print("{_VERSION_MARK}", name, version(name))\n'
        f'print("imported {" ".join(modules)}")\n'
    )
    return f"python3 -c {shlex.quote(script)}"


_BASE_LOCKS: dict[str, threading.Lock] = {}  # one bootstrap per base image at a time


def _local_base(job: JobState, name: str, tag: str,
                request: BaseRequest | None = None) -> tuple[str, dict[str, str]]:  # fmt: skip
    """The id and labels of the local engine's base image ``tag`` of target ``name``,
    bootstrapped first when missing and dockerarch can (from ``request`` when given)."""
    with _BASE_LOCKS.setdefault(tag, threading.Lock()):  # concurrent jobs share the amd64 base
        local = job.engine.image_labels(tag)
        if local is not None:
            return local
        from dockerarch import base

        request = request or _bootstrap_request(name, tag)
        job.say(f"no base {tag} yet: bootstrapping it (a few minutes, once)")
        made = base.bootstrap(request, progress=job.say)
        job.say(f"base {tag} made in {made.seconds:.0f} s ({made.image_id[:19]})"
                + (f"; {made.note}" if made.note else ""))  # fmt: skip
        return made.image_id, (job.engine.image_labels(tag) or (made.image_id, {}))[1]


def _bootstrap_request(name: str, tag: str) -> BaseRequest:
    """How dockerarch would bootstrap target ``name``'s base ``tag``, or a UsageError saying
    why it cannot unaided (a base from an SD card, a base_image of the user's own)."""
    from dockerarch import base
    from dockerarch.targets import load_targets

    try:
        request = base.make_request(load_targets()[name])
        if request.tag != tag:
            raise UsageError(f"its base_image is {tag}, not a base dockerarch makes")
    except UsageError as exc:
        raise UsageError(
            f"Target '{name}' has no base image {tag} yet, and dockerarch cannot bootstrap "
            f"one unaided: {exc.problem}",
            fix=f"Make it first: dockerarch base bootstrap --target {name} --mirror URI, "
            f"or base import-img SDCARD --target {name}.",
        ) from exc
    return request


def _registry_cache_ref(job: JobState) -> str | None:
    """registry.yaml's build cache for this build, when on and the builder can reach it."""
    cache = job.options.registry_cache
    if cache is None:
        return None
    if job.route.context is not None and job.options.registry_cache_loopback:
        job.say(f"registry cache skipped: {cache} is on this machine only, "
                f"which node '{job.route.builder}' cannot reach")  # fmt: skip
        return None
    name = f"{job.target}-{job.request.result_name}-{job.decision.accel}".lower()
    return f"{cache}:{re.sub(r'[^a-z0-9_.-]', '-', name)[:128]}"


def _hybrid_counts(job: JobState, toolchain_log: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Where the build's compiler runs ran, from dockerarch-cc's log (exported with the
    artifacts: read even when every step was cached), and the emulated programs that started
    any of them, by name."""
    log = toolchain_log.read_text(errors="replace")
    counts, starters = accel.count_runs(log), accel.emulated_starters(log)
    cached = accel.count_ccache((toolchain_log.parent / "ccache.log").read_text(errors="replace"))
    counts.update({f"ccache_{k}": v for k, v in cached.items()})
    if cached["hits"] or cached["misses"]:
        job.say(f"ccache: {cached['hits']} of {cached['hits'] + cached['misses']} compiles "
                "from the cache")  # fmt: skip
    remote = job.options.compiler_cache
    if remote is not None and job.request.toolchain is not None and job.request.toolchain.ccache:
        local = cached["hits"] - cached["remote_hits"]
        job.say(f"shared compiler cache {remote.config.url}: {local} local hits, "
                f"{cached['remote_hits']} remote hits, {cached['misses']} compiled, "
                f"{cached['sent']} objects sent"
                + (" (read-only)" if remote.config.read_only else ""))  # fmt: skip
        if cached["remote_errors"]:
            rest = cached["remote_skipped"]
            job.say(f"warning: the shared compiler cache failed {cached['remote_errors']} "
                    "compiles' lookups or writes (down, refused or too slow): they were compiled "
                    "or kept here"
                    + (f"; the build's {rest} later compiles did not ask it again" if rest else "")
                    )  # fmt: skip
    by = ", ".join(f"{program} {n}" for program, n in starters.items())
    job.say(f"hybrid: {counts['compiles']} compiles, {counts['native']} of {counts['runs']} compiler "
            f"runs native (x86-64), {counts['emulated']} under QEMU; "
            f"{counts['started_by_native']} started by a native program, "
            f"{counts['started_by_emulated']} by an emulated one" + (f" ({by})" if by else ""))  # fmt: skip
    return counts, starters


def _verified_copy(landing: Path, reports: list[artifacts.ArtifactReport], work: Path) -> Path:
    """A directory holding only the verified artifacts (hard links where the file system allows),
    the runtime stage's named context: the landing directory also holds build.log, which grows
    while the job runs and would change the context's checksum."""
    verified = work / context_name("verified", work)
    verified.mkdir()
    for report in reports:
        try:
            os.link(landing / report.name, verified / report.name)
        except OSError:
            shutil.copy2(landing / report.name, verified / report.name)
    return verified
