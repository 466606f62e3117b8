"""`dockerarch build`: every target's build as a job, all at once.

A job runs the build's steps (buildsteps.STEPS: ensure the base, prepare the context, build and
export the artifacts, verify them, push the registry cache, build the runtime image, smoke-test
it, write manifest.json) in a temporary directory beside its result, and only then renames it
into ``OUT/<target>/<recipe>-<version>/``. A failed job leaves an earlier good result untouched;
its log is kept beside it for reading, as is the log of a run that was interrupted or killed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from dockerarch import accel, builders, engine, process
from dockerarch.buildsteps import STEPS, BuildOptions, Engine, JobState
from dockerarch.errors import DockerarchError, Interrupted, UsageError
from dockerarch.files import abandoned_work_dirs, inside, make_work_dir, replace_dir
from dockerarch.render import RenderRequest

__all__ = ["BuildOptions", "Feed", "Job", "JobResult", "Progress", "host_ca_bundle", "plan_accel",
           "resolve_uses", "run_jobs", "run_queues"]  # fmt: skip

CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


class Progress(Protocol):
    """Where jobs report (progress.Board): messages, and what each target's build does now."""

    def say(self, name: str, line: str) -> None: ...
    def step(self, name: str, words: str) -> None: ...
    def count(self, name: str, words: str, done: int, total: int, shown: str) -> None: ...
    def end(self, name: str, words: str) -> None: ...
    def reopen(self, name: str) -> None: ...


@dataclass(kw_only=True)
class JobResult:
    target: str
    directory: Path | None = None
    artifacts: list[Path] = field(default_factory=list)
    error: DockerarchError | None = None
    seconds: float = 0.0
    log: Path | None = None
    hybrid: dict[str, int] | None = None  # compiler runs: native, emulated (hybrid builds)


def host_ca_bundle() -> str | None:
    """The host's CA bundle (with a TLS-intercepting proxy's CA in it, when there is one)."""
    explicit = os.environ.get("DOCKERARCH_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE")
    for candidate in ([explicit] if explicit else []) + list(CA_BUNDLES):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


class Job:
    """One target's build: its steps run in a temporary directory beside the result, which is
    renamed into place only when every step passed."""

    def __init__(self, request: RenderRequest, options: BuildOptions, progress: Progress,
                 route: builders.Route, decision: accel.Decision,
                 engine: Engine = engine) -> None:  # fmt: skip
        self.request = dataclasses.replace(request, toolchain=decision.toolchain)
        self.route, self.decision, self.options = route, decision, options
        self.progress, self.engine = progress, engine
        self.target = request.target
        self.final = inside(options.out, self.target.name, request.result_name)
        self.contexts: dict[str, str] = {}  # named build contexts from other results (uses)
        if request.wheelset is not None:
            self.contexts["wheelset"] = str(request.wheelset)
            self.contexts["wheelset-build"] = str(request.wheelset_build or request.wheelset)
        self.work: Path | None = None  # the job's temporary directory while it runs

    def run(self) -> JobResult:
        started = time.monotonic()
        result = JobResult(target=self.target.name)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self._clear_abandoned()
        self.work = work = make_work_dir(self.final.parent, self.final.name)
        landing = work / "result"
        landing.mkdir()
        log_path = landing / "build.log"
        try:
            # Line-buffered: a Ctrl-C stops this thread with no flush, and the log kept then
            # (keep_interrupted_log) must hold every line buildx had printed.
            with log_path.open("w", buffering=1) as log:
                state = self.new_state(work, log, started)
                for name, step in STEPS:
                    if process.interrupting():  # Ctrl-C: no further step starts a program
                        raise Interrupted(f"Ctrl-C came before the step '{name}'")
                    began = time.monotonic()
                    step(state)
                    state.timings.append((name, time.monotonic() - began))
            made = sorted(
                p.name for p in landing.iterdir() if p.name not in ("build.log", "manifest.json")
            )
            replace_dir(
                landing, self.final, remove=lambda old: shutil.rmtree(old, ignore_errors=True)
            )
            result.directory, result.log = self.final, self.final / "build.log"
            result.artifacts = [self.final / name for name in made]
            result.hybrid = state.hybrid
        except DockerarchError as exc:
            result.error = exc
            if log_path.exists() and log_path.stat().st_size > 0:
                ended = "interrupted" if process.interrupting() else "failed"  # Ctrl-C stopped it
                result.log = self.final.parent / f"{self.final.name}.{ended}.log"
                os.replace(log_path, result.log)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            self.work = None
            result.seconds = time.monotonic() - started
        return result

    def new_state(self, work: Path, log: TextIO, started: float) -> JobState:
        """The steps' shared state for a run in ``work``."""
        name = self.target.name
        return JobState(
            request=self.request, route=self.route, decision=self.decision, options=self.options,
            engine=self.engine, work=work, log=log, started=started, contexts=dict(self.contexts),
            say=lambda line: self.progress.say(name, line),
            step=lambda words: self.progress.step(name, words),
            count=lambda words, done, total, shown: self.progress.count(name, words, done, total, shown),
        )  # fmt: skip

    def _clear_abandoned(self) -> None:
        """What a run of this build killed outright (SIGKILL, a closed session) left: its log
        so far kept as an interrupted one's is, its temporary directory removed. What it had
        compiled is in the compiler cache; this run continues from there."""
        for stale in abandoned_work_dirs(self.final.parent, self.final.name):
            log = stale / "result" / "build.log"
            if log.is_file() and log.stat().st_size > 0:
                kept = self.final.parent / f"{self.final.name}.interrupted.log"
                os.replace(log, kept)
                self.progress.say(
                    self.target.name, f"an earlier run of this build was killed; its log: {kept}"
                )
            shutil.rmtree(stale, ignore_errors=True)

    def keep_interrupted_log(self) -> Path | None:
        """On Ctrl-C, for a job whose thread did not end once buildx had (its cleanup never
        runs): its log so far kept beside the result, as a failed one is, and its temporary
        directory removed."""
        work = self.work
        if work is None:
            return None
        kept = None
        log = work / "result" / "build.log"
        if log.exists():
            kept = self.final.parent / f"{self.final.name}.interrupted.log"
            os.replace(log, kept)
        shutil.rmtree(work, ignore_errors=True)
        return kept


def plan_accel(
    requests: list[RenderRequest], routes: list[builders.Route], mode: str, *, ccache: bool = True
) -> list[accel.Decision]:
    """Hybrid, plain QEMU or native for each request (asks the host's apt which cross compilers
    Debian has, once per package)."""
    from dockerarch.targets import load_targets

    targets = load_targets()
    wanted: dict[str, list[str]] = {}  # suite: the cross packages any of these builds may ask for
    for r in requests:
        base = accel.toolchain_base(r.target, targets)
        if base.arch != r.target.arch:
            wanted.setdefault(base.suite, []).extend(
                accel.cross_packages(r.target.triplet, r.target.gcc, fortran=True)
            )
    for suite, packages in wanted.items():  # one apt-cache run per suite, not one per package
        accel.host_apt_has_all(packages, suite)

    return [
        accel.decide(
            r.target,
            r.recipe,
            requested=mode,
            route_accel=route.accel,
            toolchain_base=accel.toolchain_base(r.target, targets),
            cross_available=accel.host_apt_has,
            ccache=ccache,
        )
        for r, route in zip(requests, routes, strict=True)
    ]


def resolve_uses(request: RenderRequest, options: BuildOptions) -> dict[str, Path]:
    """The named contexts a recipe takes from other results (``uses``): --use NAME=DIR, or the
    result directory OUT/<target>/<pattern>. Checked before anything is built."""
    found: dict[str, Path] = {}
    for name, pattern in request.recipe.uses.items():
        given = options.uses.get(name)
        path = given or options.out / request.target.name / pattern.format(**request.options)
        if not path.is_dir() or not any(p.is_file() for p in path.iterdir()):
            result = pattern.format(**request.options)
            recipe, _, version = result.rpartition("-")
            how = (
                f"--use {name}={given} names no directory holding files"
                if given
                else f"it takes {name} from {path}, the result of `dockerarch build {recipe} "
                f"--version {version} --target {request.target.name}`, which is not there"
            )
            raise UsageError(
                f"Recipe '{request.recipe.name}' cannot build for {request.target.name}: {how}.",
                fix=f"Build that first (with the same --out), or name a directory that holds "
                f"what it needs for the target: --use {name}=DIR.",
            )
        found[name] = path.resolve()
    unknown = sorted(set(options.uses) - set(request.recipe.uses))
    if unknown:
        takes = ", ".join(request.recipe.uses) or "none"
        raise UsageError(
            f"--use {unknown[0]}=... is not a context recipe '{request.recipe.name}' takes "
            f"(it takes: {takes})",
            fix="Drop it, or check the name with dockerarch recipes --json.",
        )
    return found


def _plan_jobs(
    requests: list[RenderRequest], options: BuildOptions, progress: Progress
) -> list[tuple[Job, dict[str, Path]]]:
    """Each request's job (its route, acceleration, named contexts); a node that does not answer
    stops the run before anything is built or written."""
    if options.indexes is not None and options.indexes.loopback:
        # the fetching steps reach an index on loopback (macros.j2's host_secrets)
        requests = [dataclasses.replace(r, index_network=True) for r in requests]
    routes = [builders.route(r.target.platform, forced=options.builder, fallback_qemu=options.fallback_qemu)
              for r in requests]  # fmt: skip
    _check_index_reach(requests, routes, options)
    uses = [resolve_uses(r, options) for r in requests]
    decisions = plan_accel(requests, routes, options.accel, ccache=options.ccache)
    cache = options.compiler_cache
    if any(s.loopback for s in options.farm) or (cache is not None and cache.config.loopback):
        # compile steps reach a farm server or the shared compiler cache on loopback
        decisions = [
            dataclasses.replace(d, toolchain=dataclasses.replace(d.toolchain, compile_network="host"))
            if d.toolchain else d for d in decisions
        ]  # fmt: skip
    for request, decision in zip(requests, decisions, strict=True):
        if decision.note:
            progress.say(request.target.name, decision.note)
    return [(Job(r, options, progress, routes[i], decisions[i]), uses[i])
            for i, r in enumerate(requests)]  # fmt: skip


def _check_index_reach(requests: list[RenderRequest], routes: list[builders.Route],
                       options: BuildOptions) -> None:  # fmt: skip
    """A build on a node cannot reach an index on this machine's loopback: its fetching steps
    on the node's host network would ask the node's own loopback (another index, or nothing).
    Refused before anything is built, not replaced by the default index (a private package's
    name could then come from a public index)."""
    indexes = options.indexes
    if indexes is None or not indexes.loopback:
        return
    for request, route in zip(requests, routes, strict=True):
        if route.context is not None and request.wheelset is None:
            raise UsageError(
                f"The build for {request.target.name} runs on node '{route.builder}', which "
                f"cannot reach the package index on this machine's loopback ({indexes.origin}: "
                f"{indexes.index_url}{''.join(' + ' + u for u in indexes.extra_index_urls)})",
                fix="Serve the index on an address the node reaches and name that in pip's "
                "configuration, or build on this machine: --builder local.",
            )


def _run_job(job: Job, uses: dict[str, Path], progress: Progress) -> JobResult:
    """One job to its end: its result, with the error it ended with (never raised)."""
    name = job.request.target.name
    result = JobResult(target=name)
    try:
        job.contexts.update({k: str(v) for k, v in uses.items()})
        result = job.run()
        if result.error is None:
            count = len(result.artifacts)
            progress.end(name, f"done: {count} artifact{'s' if count != 1 else ''} verified")
        elif process.interrupting():
            if result.log is not None:
                progress.say(name, f"interrupted; its log so far: {result.log}")
            progress.end(name, "interrupted")
        else:
            progress.end(name, f"failed (exit code {result.error.exit_code})")
    except DockerarchError as exc:
        result.error = exc
        progress.end(name, "failed")
    except Exception as exc:
        progress.end(name, "failed")
        error = DockerarchError(
            f"internal error while building for {name}: {type(exc).__name__}: {exc}",
            fix="This is a bug in dockerarch: run again with --debug and report it.",
        )
        error.__cause__ = exc
        result.error = error
    return result


def _wait(threads: list[threading.Thread], jobs: list[Job], progress: Progress) -> None:
    """Until every thread ends. On Ctrl-C, buildx is stopped and waited for (BuildKit would give
    a build started at once the cancelled one's steps), each job ends as interrupted with its log
    so far kept, and the interrupt goes on up."""
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # wakes up for Ctrl-C
    except KeyboardInterrupt:
        names = [job.target.name for job in jobs] or ["dockerarch"]
        process.interrupt_children(say=lambda line: progress.say(names[0], line))
        deadline = time.monotonic() + 10  # each job's own end: its log kept, its work removed
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for job in list(jobs):  # a job whose thread is stuck: its log kept from here
            kept = job.keep_interrupted_log()
            if kept is not None:
                progress.say(job.target.name, f"interrupted; its log so far: {kept}")
        raise


def run_jobs(
    requests: list[RenderRequest], options: BuildOptions, progress: Progress
) -> list[JobResult]:
    """Build every target concurrently (buildx and BuildKit share the machine)."""
    planned = _plan_jobs(requests, options, progress)
    results: list[JobResult] = [JobResult(target=r.target.name) for r in requests]

    def work(index: int) -> None:
        results[index] = _run_job(*planned[index], progress)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    _wait(threads, [job for job, _ in planned], progress)
    return results


Feed = Callable[[JobResult | None], RenderRequest | None]


def run_queues(feeds: list[Feed], options: BuildOptions, progress: Progress) -> None:
    """Jobs one after another per feed, the feeds side by side: each feed is asked for its next
    request with the result of its last (None the first time) until it answers None. A
    target's next build starts when its own last one ends, not when every target's has (a
    wheel set's members: armv7 builds cffi and then zstandard while aarch64 builds zstandard).
    An exception a feed raises ends the run once every feed has stopped."""
    jobs: list[Job] = []
    failed: list[BaseException] = []

    def work(feed: Feed) -> None:
        last: JobResult | None = None
        try:
            while not process.interrupting() and (request := feed(last)) is not None:
                ((job, uses),) = _plan_jobs([request], options, progress)
                jobs.append(job)
                last = _run_job(job, uses, progress)
        except BaseException as exc:  # raised again in the caller's thread
            failed.append(exc)

    threads = [threading.Thread(target=work, args=(f,), daemon=True) for f in feeds]
    for thread in threads:
        thread.start()
    _wait(threads, jobs, progress)
    if failed:
        raise failed[0]
