"""The steps that compile: the context prepared (secrets: the shared compiler cache's, the
farm's), the farm chosen, the artifacts built and exported with the compiler-run log, verified
against the target, and the registry's build cache pushed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from dockerarch import (
    accel,
    artifacts,
    compilercache,
    libneeds,
)
from dockerarch import farm as farm_module
from dockerarch.buildsteps.images import toolchain_landed
from dockerarch.buildsteps.state import JobState, stream, write_context, write_dockerfile
from dockerarch.engine import BuildSpec
from dockerarch.errors import EngineError
from dockerarch.files import context_name, linked_view


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
        if (
            not job.request.own_code
            and not remote.config.read_only
            and not remote.writes(own_code=False)
        ):
            job.say("compiler cache: read only for this build (not your own code: it never "
                    "gets the writer's credential)")  # fmt: skip
        # the server's URL with its credentials: only ever this file (0600), a build secret
        fd = os.open(job.work / CACHE_SECRET, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(storage + "\n")


def use_farm(job: JobState) -> None:
    """--farm: this build's own toolchain stage (amd64, cached from the build; a native build's
    build-tools stage, its gcc and g++ set up for the farm) compiles a probe on each server alone;
    those that answer with the same toolchain take compiles, through a hosts line given to the
    compiling steps as a secret. A server left out is said."""
    servers = job.options.farm
    toolchain = job.request.toolchain
    if not servers:
        return
    native = toolchain is None and job.request.target.arch.name == "amd64"
    if toolchain is None and not native:
        job.say("farm not used: this build has no hybrid toolchain (plain QEMU)")
        return
    if job.route.context is not None:
        job.say(f"farm not used: the build runs on node '{job.route.builder}'")
        return
    loopback = any(s.loopback for s in servers)
    unfarmed = job.request
    if native:  # the build stage set up for the farm, probed from its build-tools stage
        job.request = dataclasses.replace(unfarmed, native_farm=True,
                                          farm_network="host" if loopback else "")  # fmt: skip
        if not (job.context / accel.CONTEXT_DIR).is_dir():
            accel.prepare_context(job.context)
        job.built_options = write_dockerfile(job.request, job.context)
    if not native:
        toolchain_landed(job)  # the probe runs in the image: here, not only in the registry
    tag = None if native or job.toolchain_remote is not None else job.toolchain_image
    if tag is None:  # the stage's own, built for the probe
        stage = "build-tools" if native else "toolchain"
        tag = re.sub(r"[^a-z0-9_./:-]", "-", f"dockerarch/{stage}:{job.target}".lower())
        spec = BuildSpec(context_dir=job.context, platform="linux/amd64",
                         stage=stage, load_tag=tag, secrets=job.secrets,
                         cache=job.options.cache, build_contexts=job.contexts,
                         allow=job.allow)  # fmt: skip
        stream(job, spec, "build tools for the farm" if native else "toolchain for the farm")
    triplet = job.request.target.triplet if toolchain is None else toolchain.triplet
    tree = farm_module.NATIVE_TREE if native else farm_module.TOOLCHAIN_TREE
    code, output = job.engine.run_in_image(
        tag, "linux/amd64", farm_module.probe_command(servers, triplet, tree),
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
        if native:  # the build as it would be without --farm
            job.request = unfarmed
            job.built_options = write_dockerfile(unfarmed, job.context)
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
    secrets = job.secrets + ((job.farm_secret,) if job.farm_secret else ())
    path = job.work / CACHE_SECRET
    if path.exists():  # written by prepare_context when the shared compiler cache is used
        secrets += (f"id={compilercache.SECRET_ID},src={path}",)
    return secrets


def build_artifacts(job: JobState) -> None:
    """One buildx invocation exports the artifacts and, in a hybrid build, the compiler-run log
    beside them (a second one would resolve the build stage again: seen re-running the toolchain
    stage, 40-50 s, when two targets built at once)."""
    hybrid = job.request.toolchain is not None
    logs = hybrid or job.request.native_farm  # the stage that exports the logs beside them
    cache_from = (
        (f"type=registry,ref={job.cache_ref}",) if job.cache_ref and job.options.cache else ()
    )
    spec = BuildSpec(
        context_dir=job.context, platform=job.request.target.platform,
        stage=accel.LOG_STAGE if logs else "artifacts", output_dir=job.landing,
        secrets=_compile_secrets(job), cache=job.options.cache, cache_from=cache_from,
        node_context=job.route.context, build_contexts=job.contexts, allow=job.allow,
    )  # fmt: skip
    stream(job, spec, "starting buildx")
    sonames = job.landing / libneeds.SONAMES_EXPORT
    if sonames.is_file():  # the build stage's library table, out of the artifacts
        job.sonames = sonames.read_text(errors="replace")
        sonames.unlink()
    toolchain = job.request.toolchain
    if toolchain is None:
        _farm_placement(job)  # a native build's with --farm
        return
    job.toolchain_log = job.work / "toolchain.log"  # the compiler-run log, out of the artifacts
    os.replace(job.landing / accel.LOG_EXPORT, job.toolchain_log)
    os.replace(job.landing / accel.CCACHE_EXPORT, job.work / "ccache.log")
    _farm_placement(job)
    if toolchain.drivers:  # and what use-native-drivers did
        exported = job.landing / accel.DRIVERS_EXPORT
        job.drivers = accel.DriverReport.parse(exported.read_text(errors="replace"))
        exported.unlink()
        for line in job.drivers.lines():
            job.say(line)
    job.hybrid, job.emulated_starters = _hybrid_counts(job, job.toolchain_log)


def _farm_placement(job: JobState) -> None:
    """Where the farm's compiles ran, out of the artifacts (said when this build used a farm)."""
    placed = job.landing / accel.FARM_EXPORT
    if placed.is_file():
        text = placed.read_text(errors="replace")
        placed.unlink()
        if job.farm_secret:
            job.farm = farm_module.Placement.parse(text)
            for line in job.farm.lines():
                job.say(line)


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
                     allow=job.allow)  # fmt: skip
    try:
        stream(job, spec, "pushing the registry cache")
    except EngineError as exc:
        why = (getattr(exc, "tail", None) or [exc.problem])[-1].strip()
        job.say(f"registry cache not pushed ({why}); the build goes on without it")
    else:
        job.say(f"registry cache pushed: {job.cache_ref}")


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
