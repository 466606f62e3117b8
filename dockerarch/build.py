"""`dockerarch build`: render, ensure the base, build with buildx, verify, smoke-test, land.

Each target's build is a job: its artifacts are exported into a temporary directory beside the
final one, verified (artifacts.py), smoke-tested in the runtime image, described by
manifest.json, and only then renamed into ``OUT/<target>/<recipe>-<version>/``. A failed job
leaves an earlier good result untouched; its log is kept beside it for reading.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from dockerarch import __version__, accel, artifacts, builders, engine, paths, steps
from dockerarch.errors import DockerarchError, EngineError, UsageError
from dockerarch.files import abandoned_work_dirs, make_work_dir, replace_dir
from dockerarch.render import RenderRequest, render

CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
_STEP = re.compile(r"^#(\d+) \[(?P<stage>[^\]]+)\] (?P<what>.+)$")
_ERROR = re.compile(r"^#(\d+) ERROR: (?P<what>.+)$")
# How far a compile step is: ninja's "[412/1217] Building CXX object ..." and the "[ 45%]" of
# cmake's Makefiles, as buildx shows them ("#19 12.34 [412/1217] ...").
_COUNT = re.compile(r"^#\d+ [\d.]+ \s*\[\s*(?:(?P<done>\d+)/(?P<total>\d+)|(?P<percent>\d+)%)\] ")
TAIL_LINES = 30
# BuildKit stops passing on a step's output past its log limits (2 MiB, 100 KiB/s by default).
_CLIPPED = re.compile(r"^#\d+ [\d.]+ \[output clipped, log limit .* reached\]")
CLIPPED_NOTE = (
    "the engine clipped this step's log (BuildKit's step log limit): its progress and any "
    "error it prints are lost from here; scripts/setup-host --stop, then scripts/setup-host, "
    "restarts dockerd without the limit"
)


class Progress(Protocol):
    """Where jobs report (progress.Board): messages, and what each target's build does now."""

    def say(self, name: str, line: str) -> None: ...
    def step(self, name: str, words: str) -> None: ...
    def count(self, name: str, words: str, done: int, total: int, shown: str) -> None: ...
    def end(self, name: str, words: str) -> None: ...


_BASE_LOCKS: dict[str, threading.Lock] = {}  # one bootstrap per base image at a time


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

    @property
    def secrets(self) -> tuple[str, ...]:
        """buildx --secret values: the host's CA bundle, when there is one."""
        return (f"id=ca-bundle,src={self.ca_bundle}",) if self.ca_bundle else ()


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


def result_name(request: RenderRequest) -> str:
    name = request.package.dist_name if request.package else request.recipe.name
    return f"{name}-{request.version}"


class StepTracker:
    """Follows buildx's plain progress: the current step, and every step's lines.

    BuildKit replays the logs of a step another build already ran (cached toolchain steps show
    their apt output again in each invocation, with the first run's timestamps): a log line
    stamped later than the step could have reached is a replay, not work, and is not announced.
    """

    REPLAY_SLACK = 2.0  # seconds a log stamp may run ahead of our clock (buffering, rounding)

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.steps: dict[str, str] = {}  # "#12" -> "[build 4/5] RUN ..."
        self.lines: dict[str, deque[str]] = {}
        self.current = "starting"
        self.failed: tuple[str, str] | None = None  # (step title, error)
        self._clock = clock
        self._seen: dict[str, float] = {}  # when each step's title arrived

    def feed(self, line: str) -> bool:
        """Take one line; True when a step starts doing work (cached steps stay quiet)."""
        number, _, rest = line.partition(" ")
        if number.startswith("#"):
            self.lines.setdefault(number, deque(maxlen=TAIL_LINES)).append(line)
        step = _STEP.match(line)
        if step:
            self.steps.setdefault(number, f"[{step.group('stage')}] {step.group('what')}")
            self._seen.setdefault(number, self._clock())
            return False
        error = _ERROR.match(line)
        if error and self.failed is None:
            self.failed = (self.steps.get(number, number), error.group("what"))
        working = number in self.steps and not rest.startswith(("CACHED", "DONE", "ERROR"))
        if working and self._replayed(number, rest):
            return False
        if working and self.steps[number] != self.current:
            self.current = self.steps[number]
            return True
        return False

    def count(self, line: str) -> tuple[int, int, str] | None:
        """How far the current step is, when ``line`` (of the current step) says: (done, total,
        as shown), from ninja's [N/M] or make's [ P%]."""
        found = _COUNT.match(line)
        if found is None or self.steps.get(line.partition(" ")[0]) != self.current:
            return None
        if found.group("percent") is not None:
            percent = int(found.group("percent"))
            return percent, 100, f"{percent}%"
        done, total = int(found.group("done")), int(found.group("total"))
        return (done, total, f"{done}/{total}") if 0 < total else None

    def _replayed(self, number: str, rest: str) -> bool:
        stamp, _, _ = rest.partition(" ")
        try:
            at = float(stamp)
        except ValueError:
            return False
        return at > self._clock() - self._seen[number] + self.REPLAY_SLACK

    def failure_report(self) -> tuple[str, list[str]]:
        if self.failed is None:
            return "the build", []
        title, _ = self.failed
        number = next((n for n, t in self.steps.items() if t == title), title)
        return title, list(self.lines.get(number, []))


class Job:
    def __init__(self, request: RenderRequest, options: BuildOptions, progress: Progress,
                 route: builders.Route, decision: accel.Decision) -> None:  # fmt: skip
        self.request = dataclasses.replace(request, toolchain=decision.toolchain)
        self.route = route
        self.decision = decision
        self.target = request.target
        self.options = options
        self.progress = progress
        self.final = options.out / self.target.name / result_name(request)
        self.contexts: dict[str, str] = {}  # named build contexts (--source)
        self.work: Path | None = None  # the job's temporary directory while it runs

    def say(self, line: str) -> None:
        self.progress.say(self.target.name, line)

    def step(self, words: str) -> None:
        self.progress.step(self.target.name, words)

    def run(self) -> JobResult:
        started = time.monotonic()
        result = JobResult(target=self.target.name)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self._clear_abandoned()
        work = make_work_dir(self.final.parent, self.final.name)
        self.work = work
        landing = work / "result"
        landing.mkdir()
        log_path = landing / "build.log"
        try:
            # Line-buffered: a Ctrl-C stops this thread with no flush, and the log kept then
            # (keep_interrupted_log) must hold every line buildx had printed.
            with log_path.open("w", buffering=1) as log:
                result.hybrid = self._build(work, landing, log, started)
            result.artifacts = sorted(
                p for p in landing.iterdir() if p.name not in ("build.log", "manifest.json")
            )
            replace_dir(
                landing, self.final, remove=lambda old: shutil.rmtree(old, ignore_errors=True)
            )
            result.directory = self.final
            result.artifacts = [self.final / p.name for p in result.artifacts]
            result.log = self.final / "build.log"
        except DockerarchError as exc:
            result.error = exc
            if log_path.exists() and log_path.stat().st_size > 0:
                kept = self.final.parent / f"{self.final.name}.failed.log"
                os.replace(log_path, kept)
                result.log = kept
        finally:
            shutil.rmtree(work, ignore_errors=True)
            self.work = None
            result.seconds = time.monotonic() - started
        return result

    def _clear_abandoned(self) -> None:
        """What a run of this build killed outright (SIGKILL, a closed session) left: its log
        so far kept as an interrupted one's is, its temporary directory removed. What it had
        compiled is in the compiler cache; this run continues from there."""
        for stale in abandoned_work_dirs(self.final.parent, self.final.name):
            log = stale / "result" / "build.log"
            if log.is_file() and log.stat().st_size > 0:
                kept = self.final.parent / f"{self.final.name}.interrupted.log"
                os.replace(log, kept)
                self.say(f"an earlier run of this build was killed; its log: {kept}")
            shutil.rmtree(stale, ignore_errors=True)

    def keep_interrupted_log(self) -> Path | None:
        """On Ctrl-C (the job's thread is stopped with the process, its cleanup never runs):
        its log so far kept beside the result, as a failed one is, and its temporary directory
        removed."""
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

    def _build(
        self, work: Path, landing: Path, log: TextIO, started: float
    ) -> dict[str, int] | None:
        request, route = self.request, self.route
        if route.note:
            self.say(route.note)
        self.say(f"building on {route.builder} ({self.decision.accel}, {route.endpoint})")
        base_id = self._ensure_base(route)
        if request.toolchain is not None:
            self._ensure_local_base(request.toolchain.base_target, request.toolchain.base_image)
        context = work / "context"
        _prepare_context(request, context)
        if request.source is not None:
            from dockerarch.sources import context_dir

            self.contexts["source"] = str(context_dir(request.source, work))
            self.say(f"source: {request.source.path}"
                     + (f" (commit {request.source.commit[:12]})" if request.source.commit else ""))  # fmt: skip
        secrets = self.options.secrets
        cache_ref = self._registry_cache_ref()
        # One invocation exports the outputs and, in a hybrid build, the compiler-run log beside
        # them: a second one would have to resolve the build stage again (seen re-running the
        # toolchain stage, 40-50 s, when two targets built at once).
        spec = engine.BuildSpec(
            context_dir=context, platform=self.target.platform,
            stage=accel.LOG_STAGE if request.toolchain is not None else "artifacts",
            output_dir=landing, secrets=secrets, cache=self.options.cache,
            cache_from=(f"type=registry,ref={cache_ref}",) if cache_ref and self.options.cache else (),
            node_context=route.context, build_contexts=self.contexts,
        )  # fmt: skip
        self._stream(spec, log, "starting buildx")
        toolchain_log = None
        drivers = None
        if request.toolchain is not None:  # the compiler-run log, out of the artifacts
            toolchain_log = work / "toolchain.log"
            os.replace(landing / accel.LOG_EXPORT, toolchain_log)
            os.replace(landing / accel.CCACHE_EXPORT, work / "ccache.log")
            if request.toolchain.drivers:  # and what use-native-drivers did
                exported = landing / accel.DRIVERS_EXPORT
                drivers = accel.DriverReport.parse(exported.read_text(errors="replace"))
                exported.unlink()
                for line in drivers.lines():
                    self.say(line)
        reports = []
        for path in sorted(landing.iterdir()):
            if path.name == "build.log":
                continue
            if path.is_dir():
                raise artifacts.VerificationError(
                    f"The artifacts stage of recipe '{request.recipe.name}' exported a directory "
                    f"({path.name})",
                    fix="Recipes put files directly in /out.",
                )
            reports.append(artifacts.verify(path, self.target))
        if not reports:
            raise artifacts.VerificationError(
                f"The build of {result_name(request)} for {self.target.name} produced no artifacts",
                fix="The recipe's build must write its outputs to /out.",
            )
        for report in reports:
            glibc = f", needs GLIBC_{report.glibc}" if report.glibc else ""
            self.say(f"verified {report.name} ({report.elf_files} ELF files{glibc})")
        if cache_ref:
            self._push_cache(context, cache_ref, log)
        image_tag = image_id = None
        smoke_output = None
        if self.options.smoke:
            image_tag = f"dockerarch/{result_name(request).rsplit('-', 1)[0]}:{request.version}-{self.target.name}"
            image_tag = re.sub(r"[^a-z0-9_./:-]", "-", image_tag.lower())
            # The verified files, as the named context `artifacts` in place of the stage: the
            # image installs exactly what was checked, without resolving the build stage again.
            runtime = engine.BuildSpec(
                context_dir=context, platform=self.target.platform, stage="runtime",
                load_tag=image_tag, secrets=secrets, cache=True, node_context=route.context,
                build_contexts={**self.contexts, "artifacts": str(_verified_copy(landing, reports, work))},
            )  # fmt: skip
            self._stream(runtime, log, "runtime image")
            found = engine.image_labels(image_tag, route.context)
            image_id = found[0] if found else None
            smoke_output = self._smoke(image_tag, route, reports, log)
        manifest = {
            "recipe": request.recipe.name,
            "version": request.version,
            "package": request.package.spec if request.package else None,
            "source": request.source.record() if request.source else None,
            "uses": {k: v for k, v in self.contexts.items() if k != "source"} or None,
            "options": dict(request.options),
            "target": self.target.name,
            "platform": self.target.platform,
            "base": {"image": self.target.base_image, "id": base_id},
            "image": {"tag": image_tag, "id": image_id},
            "artifacts": [r.as_dict() for r in reports],
            "builder": {"name": route.builder, "endpoint": route.endpoint},
            "accel": self.decision.accel,
            "hybrid": self._hybrid_counts(toolchain_log) if toolchain_log else None,
            "drivers": drivers.as_dict() if drivers else None,
            "smoke": smoke_output,
            "seconds": round(time.monotonic() - started, 1),
            "dockerarch": __version__,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (landing / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest["hybrid"]  # type: ignore[return-value]

    def _registry_cache_ref(self) -> str | None:
        """registry.yaml's build cache for this build, when on and the builder can reach it."""
        if self.options.registry_cache is None:
            return None
        if self.route.context is not None and self.options.registry_cache_loopback:
            self.say(f"registry cache skipped: {self.options.registry_cache} is on this machine only, "
                     f"which node '{self.route.builder}' cannot reach")  # fmt: skip
            return None
        tag = re.sub(
            r"[^a-z0-9_.-]",
            "-",
            f"{self.target.name}-{result_name(self.request)}-{self.decision.accel}".lower(),
        )
        return f"{self.options.registry_cache}:{tag[:128]}"

    def _push_cache(self, context: Path, ref: str, log: TextIO) -> None:
        """Push the build stage with its inline cache: later builds anywhere that reach the
        registry reuse its steps. A cache that cannot be pushed does not fail the build."""
        spec = engine.BuildSpec(context_dir=context, platform=self.target.platform, stage="build",
                                push_tag=ref, cache_to="type=inline", secrets=self.options.secrets,
                                cache=True, node_context=self.route.context,
                                build_contexts=self.contexts)  # fmt: skip
        try:
            self._stream(spec, log, "pushing the registry cache")
        except EngineError as exc:
            why = (getattr(exc, "tail", None) or [exc.problem])[-1].strip()
            self.say(f"registry cache not pushed ({why}); the build goes on without it")
        else:
            self.say(f"registry cache pushed: {ref}")

    def _hybrid_counts(self, toolchain_log: Path) -> dict[str, int]:
        """Where the build's compiler runs ran, from dockerarch-cc's log (exported with the
        artifacts: read even when every step was cached)."""
        counts = accel.count_runs(toolchain_log.read_text(errors="replace"))
        cached = accel.count_ccache(
            (toolchain_log.parent / "ccache.log").read_text(errors="replace")
        )
        counts.update({f"ccache_{k}": v for k, v in cached.items()})
        if cached["hits"] or cached["misses"]:
            self.say(f"ccache: {cached['hits']} of {cached['hits'] + cached['misses']} compiles "
                     "from the cache")  # fmt: skip
        self.say(f"hybrid: {counts['compiles']} compiles, {counts['native']} of {counts['runs']} compiler "
                 f"runs native (x86-64), {counts['emulated']} under QEMU; "
                 f"{counts['started_by_native']} started by a native program, "
                 f"{counts['started_by_emulated']} by an emulated one")  # fmt: skip
        return counts

    def _ensure_local_base(self, name: str, tag: str) -> str:
        """The id of the local engine's base image ``tag`` of target ``name``, bootstrapped
        first when missing and dockerarch can."""
        with _BASE_LOCKS.setdefault(tag, threading.Lock()):  # concurrent jobs share the amd64 base
            return self._ensure_local_base_locked(name, tag)

    def _ensure_local_base_locked(self, name: str, tag: str) -> str:
        from dockerarch import base
        from dockerarch.targets import load_targets

        local = engine.image_labels(tag)
        if local is not None:
            return local[0]
        target = load_targets()[name]
        try:
            request = base.make_request(target)
            if request.tag != tag:
                raise UsageError(f"its base_image is {tag}, not a base dockerarch makes")
        except UsageError as exc:
            raise UsageError(
                f"Target '{name}' has no base image {tag} yet, and dockerarch cannot bootstrap "
                f"one unaided: {exc.problem}",
                fix=f"Make it first: dockerarch base bootstrap --target {name} --mirror URI, "
                f"or base import-img SDCARD --target {name}.",
            ) from exc
        self.say(f"no base {tag} yet: bootstrapping it (a few minutes, once)")
        return base.bootstrap(request, progress=self.say).image_id

    def _ensure_base(self, route: builders.Route) -> str:
        tag = self.target.base_image
        local = self._ensure_local_base(self.target.name, tag)
        if route.context is not None:
            remote = engine.image_labels(tag, route.context)
            if remote is None or remote[0] != local:
                self.say(f"copying the base {tag} to node {route.builder}")
                engine.copy_image(tag, route.context)
        return local

    def _stream(self, spec: engine.BuildSpec, log: TextIO, first: str) -> None:
        """One buildx invocation, its lines to the log; ``first`` is said until a step works."""
        self.step(first)
        tracker = StepTracker()
        subject = result_name(self.request).rsplit("-", 1)[0]
        log.write(f"### buildx: stage {spec.stage} for {spec.platform}\n")
        started = time.monotonic()
        clipped = False
        try:
            for chunk in engine.build_lines(spec):
                for line in chunk.splitlines():
                    log.write(line + "\n")
                    if tracker.feed(line):
                        self.step(steps.describe(tracker.current, subject=subject))
                    elif (count := tracker.count(line)) is not None:
                        self.progress.count(self.target.name, steps.describe(
                            tracker.current, subject=subject), *count)  # fmt: skip
                    elif _CLIPPED.search(line) and not clipped:
                        clipped = True
                        self.say(CLIPPED_NOTE)
        except engine.BuildFailed as exc:
            log.flush()
            if tracker.failed is None:  # no step failed: buildx itself was stopped
                raise BuildStopped(
                    self.target.name,
                    steps.describe(tracker.current, subject=subject),
                    exc.return_code,
                ) from exc
            title, tail = tracker.failure_report()
            raise BuildStepFailed(self.target.name, title, tail) from exc
        # Wall-clock time of the invocation: BuildKit's own DONE times include replays.
        log.write(f"### buildx: stage {spec.stage} took {time.monotonic() - started:.1f} s\n")

    def _smoke(self, image: str, route: builders.Route, reports: list[artifacts.ArtifactReport],
               log: TextIO) -> str:  # fmt: skip
        command = shlex.join(self.request.recipe.smoke)  # the recipe gives an argv
        if not command:
            modules = sorted({m for r in reports for m in r.top_level})
            if not modules:
                return "nothing to import"
            command = (
                f"python3 -c 'import {', '.join(modules)}; print(\"imported {' '.join(modules)}\")'"
            )
        self.step("smoke test")
        code, output = engine.run_in_image(image, self.target.platform, command, route.context)
        log.write(f"### smoke test: {command}\n{output}\n")
        if code != 0:
            raise SmokeFailed(
                f"{self.target.name}: the smoke test failed in {image} (exit code {code}): "
                + " / ".join(output.strip().splitlines()[-5:]),
                fix="The artifacts built and verified but do not work installed; see build.log. "
                "--no-smoke skips the test.",
            )
        said = output.strip().splitlines()[-1] if output.strip() else "ok"
        self.say(f"smoke test passed: {said}")
        return said


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


def _prepare_context(request: RenderRequest, context: Path) -> None:
    """The recipe's context directory plus the rendered Dockerfile."""
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
    (context / "Dockerfile").write_text(render(request, paths.template_dirs()))


def _verified_copy(landing: Path, reports: list[artifacts.ArtifactReport], work: Path) -> Path:
    """A directory holding only the verified artifacts (hard links where the file system allows),
    the runtime stage's named context: the landing directory also holds build.log, which grows
    while the job runs and would change the context's checksum."""
    verified = work / "verified"
    verified.mkdir()
    for report in reports:
        try:
            os.link(landing / report.name, verified / report.name)
        except OSError:
            shutil.copy2(landing / report.name, verified / report.name)
    return verified


def plan_accel(
    requests: list[RenderRequest], routes: list[builders.Route], mode: str, *, ccache: bool = True
) -> list[accel.Decision]:
    """Hybrid, plain QEMU or native for each request (asks the host's apt which cross compilers
    Debian has, once per package)."""
    from dockerarch.targets import load_targets

    targets = load_targets()
    known: dict[tuple[str, str], bool] = {}

    def available(package: str, suite: str) -> bool:
        if (package, suite) not in known:
            known[package, suite] = accel.host_apt_has(package, suite)
        return known[package, suite]

    return [
        accel.decide(
            r.target,
            r.recipe,
            requested=mode,
            route_accel=route.accel,
            toolchain_base=accel.toolchain_base(r.target, targets),
            cross_available=available,
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


def run_jobs(
    requests: list[RenderRequest], options: BuildOptions, progress: Progress
) -> list[JobResult]:
    """Build every target concurrently (buildx and BuildKit share the machine)."""
    results: list[JobResult] = [JobResult(target=r.target.name) for r in requests]
    # Every route first: a node that does not answer stops the run before anything is built or written.
    routes = [builders.route(r.target.platform, forced=options.builder, fallback_qemu=options.fallback_qemu)
              for r in requests]  # fmt: skip
    uses = [resolve_uses(r, options) for r in requests]
    decisions = plan_accel(requests, routes, options.accel, ccache=options.ccache)
    for request, decision in zip(requests, decisions, strict=True):
        if decision.note:
            progress.say(request.target.name, decision.note)

    def work(index: int, request: RenderRequest) -> None:
        name = request.target.name
        try:
            job = jobs[index]
            job.contexts.update({k: str(v) for k, v in uses[index].items()})
            results[index] = job.run()
            result = results[index]
            if result.error is None:
                count = len(result.artifacts)
                progress.end(name, f"done: {count} artifact{'s' if count != 1 else ''} verified")
            else:
                progress.end(name, f"failed (exit code {result.error.exit_code})")
        except DockerarchError as exc:
            results[index].error = exc
            progress.end(name, "failed")
        except Exception as exc:
            progress.end(name, "failed")
            error = DockerarchError(
                f"internal error while building for {request.target.name}: "
                f"{type(exc).__name__}: {exc}",
                fix="This is a bug in dockerarch: run again with --debug and report it.",
            )
            error.__cause__ = exc
            results[index].error = error

    jobs = [Job(r, options, progress, routes[i], decisions[i]) for i, r in enumerate(requests)]
    threads = [
        threading.Thread(target=work, args=(i, r), daemon=True) for i, r in enumerate(requests)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # wakes up for Ctrl-C
    except KeyboardInterrupt:
        for job in jobs:
            kept = job.keep_interrupted_log()
            if kept is not None:
                progress.say(job.target.name, f"interrupted; its log so far: {kept}")
        raise
    return results
