"""The steps that give a hybrid build its machine images: the toolchain image (the native
stages) and the runtime base, each made once per machine under its key.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from dockerarch import (
    accel,
    machineimages,
)
from dockerarch.buildsteps.state import JobState, PendingImage, in_background, stream
from dockerarch.engine import BuildSpec
from dockerarch.errors import EngineError

_IMAGE_LOCKS: dict[str, threading.Lock] = {}  # one build of each machine image at a time


def _machine_image(job: JobState, tag: str, key: str, platform: str, stage: str, what: str,
                   shared: str, *, look: bool = True, build_args: dict[str, str] | None = None,
                   found: Future[bool] | None = None) -> None:  # fmt: skip
    """Build ``stage`` of the job's Dockerfile into the engine as ``tag``, unless it is there or
    (``look``) the team's registry has it under the same key (one build of a tag at a time: a
    set's members may ask for it together); push what was made when the registry takes it.
    ``found`` is told, before anything is made, whether the image was there or pulled."""
    with _IMAGE_LOCKS.setdefault(tag, threading.Lock()):
        there = job.engine.image_labels(tag) is not None
        if not there:
            there = look and pulled(job, tag, machineimages.KEY_LABEL, key, platform, what)
        if found is not None:
            found.set_result(there)
        if not there:
            spec = BuildSpec(context_dir=job.context, platform=platform, stage=stage,
                             load_tag=tag, secrets=job.secrets, cache=job.options.cache,
                             build_contexts=job.contexts, allow=job.allow,
                             labels={machineimages.KEY_LABEL: key},
                             build_args=build_args)  # fmt: skip
            began = time.monotonic()
            stream(job, spec, f"{what} (once per machine)")
            job.say(f"{what} {tag} made in {time.monotonic() - began:.0f} s: builds that "
                    f"need {shared} start from it")  # fmt: skip
            pushed(job, tag, what)
    machineimages.record_use(tag)  # what dockerarch prune reads: used, so kept


def pulled(job: JobState, tag: str, label: str, value: str, platform: str, what: str,
           remote: str | None = None, otherwise: str = "made here") -> bool:  # fmt: skip
    """Whether the team's registry (registry.yaml's machine_images) gave ``tag``: pulled (from
    ``remote``, by default its tag there), taken only when its ``label`` is ``value`` (the key
    of what it is made from) and its platform is the one asked for (anything else is untagged,
    and the caller makes it)."""
    sharing = job.options.machine_images
    if sharing is None:
        return False
    remote = remote or sharing.remote(tag)
    began = time.monotonic()
    try:
        found = job.engine.pull_image(remote, platform)
    except EngineError as exc:
        job.say(f"{what}: not pulled from {sharing.prefix} ({exc.problem}): {otherwise}")
        return False
    if found is None:
        job.say(f"{what}: {sharing.prefix} has no {remote.removeprefix(sharing.prefix + '/')}: "
                f"{otherwise}")  # fmt: skip
        return False
    try:
        if not _as_asked(job, remote, found.labels, found.platform, (label, value, platform),
                         otherwise):  # fmt: skip
            return False
        job.engine.tag_image(remote, tag)
    finally:
        job.engine.remove_tag(remote)  # the engine keeps it under its own tag only (prune)
    job.say(f"{what} {tag} pulled from {sharing.prefix} in {time.monotonic() - began:.0f} s "
            "(what it is made from and its platform checked)")  # fmt: skip
    return True


def _as_asked(job: JobState, remote: str, labels: dict[str, str], platform: str,
              asked: tuple[str, str, str], otherwise: str) -> bool:  # fmt: skip
    """Whether an image found in the team's registry is what its tag says: its ``asked`` label
    (name, value) and platform; one that is not is said, with what is done instead."""
    label, value, wanted = asked
    if labels.get(label) == value and machineimages.same_platform(platform, wanted):
        return True
    job.say(f"warning: {remote} is not what its tag says ({label} "
            f"{labels.get(label, 'none')[:16]}, platform {platform}; asked {value[:16]}, "
            f"{wanted}): not taken, {otherwise}")  # fmt: skip
    return False


def pushed(job: JobState, tag: str, what: str) -> None:
    """``tag`` pushed to the team's registry when it takes machine images (push), in a thread of
    its own while the build goes on with the image (a toolchain image's push is 20-30 s of gzip
    the build need not wait for); pushes_done waits for it before the manifest. A push that
    fails is said, and the build goes on."""
    sharing = job.options.machine_images
    if sharing is None or not sharing.push:
        return
    job.pushes.append(in_background(lambda: _push(job, tag, sharing, what)))


def _push(job: JobState, tag: str, sharing: machineimages.Sharing, what: str) -> None:
    remote = sharing.remote(tag)
    began = time.monotonic()
    try:
        job.engine.push_as(tag, remote)
    except EngineError as exc:
        job.say(f"warning: {what} not pushed to {sharing.prefix} ({exc.problem}): other "
                "machines will make it themselves")  # fmt: skip
        return
    finally:
        job.engine.remove_tag(remote)
    job.say(f"{what} pushed to {remote} in {time.monotonic() - began:.0f} s")


def pushes_done(job: JobState) -> None:
    """The machine images pushed meanwhile (pushed), waited for: the job ends with them in the
    team's registry (or said not to be)."""
    pending, job.pushes[:] = list(job.pushes), []
    if any(not push.done() for push in pending):
        job.step(f"pushing {len(pending)} machine image{'s' * (len(pending) != 1)}")
    for push in pending:
        push.result()


def toolchain_image(job: JobState) -> None:
    """A hybrid build's native stages (the x86-64 Python, the cross toolchain, uv, the native
    drivers) come from an image of this machine's, tagged with the sha256 of everything they are
    made from (accel.toolchain_key): built once, like a base, then given to every build that
    needs the same in place of those stages. A cold build (--no-cache) rebuilds the package, not
    the compilers: with the key, a changed package list, driver or script is a new image.
    Its lower layers, the native Python, are an image of their own (accel.native_python_key),
    which the emulated stages' apt steps take without waiting for the rest.
    What the machine lacks is got in threads of their own, their buildx lines in logs of their
    own, while the job waits for its base and makes its runtime base: the native Python image
    (pulled from the team's registry, or made) and beside it the toolchain image -- made (on the
    native Python image when it is here), or, when the team's registry has it under its key,
    named by its digest there, so that the build pulls it beside its first steps
    (toolchain_ready waits for what the build needs, and toolchain_landed keeps it on the
    machine after)."""
    toolchain = job.request.toolchain
    if toolchain is None or job.route.context is not None or job.toolchain_base_id is None:
        return  # a remote node builds its stages itself
    dockerfile = (job.context / "Dockerfile").read_text()
    python_key = accel.native_python_key(dockerfile, job.toolchain_base_id)
    python_tag = f"dockerarch/native-python:{toolchain.base_target}-{python_key[:16]}"
    key = accel.toolchain_key(dockerfile, job.context, job.toolchain_base_id)
    tag = f"dockerarch/toolchain:{toolchain.triplet}-gcc{toolchain.gcc}-{key[:16]}"
    python_here = job.engine.image_labels(python_tag) is not None
    if python_here and job.engine.image_labels(tag) is not None:  # the usual case
        for here in (python_tag, tag):
            machineimages.record_use(here)
        job.build_args[accel.NATIVE_PYTHON_ARG] = python_tag
        _use_toolchain(job, tag, tag)
        return

    def meanwhile(log: Path) -> JobState:
        return dataclasses.replace(job, log=log.open("w", buffering=1), step=lambda words: None,
                                   count=lambda *counted: None)  # fmt: skip

    python_log, log = job.work / "native-python-image.log", job.work / "toolchain-image.log"
    python_job, toolchain_job = meanwhile(python_log), meanwhile(log)

    python_found: Future[bool] = Future()

    def native_python() -> None:
        try:
            _machine_image(python_job, python_tag, python_key, "linux/amd64",
                           accel.NATIVE_PYTHON_STAGE, "native Python image",
                           "the same native Python", found=python_found)  # fmt: skip
        finally:
            python_job.log.close()
            if not python_found.done():  # it failed before it knew
                python_found.set_result(False)

    python_done = in_background(native_python)

    def toolchain_source() -> str:
        """The reference the build takes the toolchain image by."""
        try:
            if job.engine.image_labels(tag) is not None:
                machineimages.record_use(tag)
                return tag
            remote = _in_registry(toolchain_job, tag, key)
            if remote is not None:
                return remote
            # Made on the native Python image when it is here; one being made meanwhile is the
            # same stage, which BuildKit builds once for both (the same layers): the cross
            # packages' install, the longest step, need not wait for it.
            on = {accel.NATIVE_PYTHON_ARG: python_tag} if python_here else None
            _machine_image(toolchain_job, tag, key, "linux/amd64", accel.NATIVE_STAGES[-1],
                           "toolchain image", "the same toolchain", look=False,
                           build_args=on)  # fmt: skip
            return tag
        finally:
            toolchain_job.log.close()

    if not python_here:
        job.say(f"native Python image {python_tag} is not on this machine: getting it while "
                "the build goes on")  # fmt: skip
    job.say(f"toolchain image {tag} is not on this machine: getting it while the build goes on")
    job.native_python_pending = PendingImage(
        tag=python_tag, done=python_done, log=python_log, found=python_found
    )
    job.toolchain_pending = PendingImage(
        tag=tag, done=in_background(toolchain_source), log=log, key=key
    )


def _in_registry(job: JobState, tag: str, key: str) -> str | None:
    """The toolchain image ``tag`` in the team's registry, by the digest of what was checked
    there (its key label is ``key``, its platform linux/amd64), through the registry's API,
    nothing pulled: the build pulls it by that digest beside its first steps (what a digest
    names cannot change). None (said) when the registry has none, or not that one: made here."""
    sharing = job.options.machine_images
    if sharing is None:
        return None
    repository, version = sharing.repository(tag)
    what = "toolchain image"
    try:
        found = job.engine.remote_image(sharing.registry, repository, version, "linux/amd64")
    except EngineError as exc:
        job.say(f"{what}: not taken from {sharing.prefix} ({exc.problem}): made here")
        return None
    if found is None:
        job.say(f"{what}: {sharing.prefix} has no {tag.removeprefix('dockerarch/')}: made here")
        return None
    asked = (machineimages.KEY_LABEL, key, "linux/amd64")
    if not _as_asked(job, sharing.remote(tag), found.labels, found.platform, asked, "made here"):
        return None
    job.say(f"{what} {tag}: {sharing.prefix} has it (what it is made from and its platform "
            "checked): the build pulls it beside its first steps")  # fmt: skip
    return f"{sharing.remote(tag)}@{found.digest}"


def native_python_ready(job: JobState) -> None:
    """The native Python image toolchain_image left being got, waited for: its buildx lines join
    the build's log, and the stages that use the native Python take it from there."""
    pending, job.native_python_pending = job.native_python_pending, None
    if pending is not None:
        _waited(job, pending, "the native Python image")
        job.build_args[accel.NATIVE_PYTHON_ARG] = pending.tag


def _waited(job: JobState, pending: PendingImage, what: str) -> Any:
    """What the thread getting ``pending`` returned, once it is done; its buildx lines join the
    build's log (after the job's own, not among them)."""
    if not pending.done.done():
        job.step(f"waiting for {what}")
    try:
        return pending.done.result()
    finally:
        if pending.log.exists():
            job.log.write(pending.log.read_text(errors="replace"))


def toolchain_ready(job: JobState) -> None:
    """What toolchain_image left being got, waited for: the native Python image, then the
    toolchain image made or pulled here, or its digest in the team's registry (checked, for the
    build to pull); the buildx lines join the build's log, and the build's native stages come
    from it."""
    native_python_ready(job)
    pending, job.toolchain_pending = job.toolchain_pending, None
    if pending is not None:
        source = _waited(job, pending, "the toolchain image")
        _use_toolchain(job, pending.tag, source, pending.key)


def _use_toolchain(job: JobState, tag: str, source: str, key: str = "") -> None:
    job.toolchain_image = tag
    job.toolchain_remote = None if source == tag else (source, key)
    job.build_args[accel.TOOLCHAIN_ARG] = source


def toolchain_landed(job: JobState) -> None:
    """The toolchain image the build pulled from the team's registry by digest, kept on this
    machine under its own tag (a docker pull of what BuildKit already has: instant; checked as
    any pull of a machine image is) and named so by the build's later invocations. One that
    cannot be kept is said: the build goes on with the registry's."""
    if job.toolchain_remote is None or job.toolchain_image is None:
        return
    (remote, key), tag = job.toolchain_remote, job.toolchain_image
    if pulled(job, tag, machineimages.KEY_LABEL, key, "linux/amd64", "toolchain image",
              remote=remote, otherwise="the build goes on with the registry's"):  # fmt: skip
        job.toolchain_remote = None
        job.build_args[accel.TOOLCHAIN_ARG] = tag
        machineimages.record_use(tag)


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
    pending = job.native_python_pending
    if job.engine.image_labels(tag) is None and pending is not None:
        # Its apt step runs the native Python: the image, when it was here or pulled (a second
        # at most); one being made is the same stage, which BuildKit builds once for both, so
        # this build's other stages (the package lists) need not wait for it.
        if pending.found is not None and not pending.found.result():
            job.say(
                "runtime base image: its native Python from the stage the native Python image "
                "is being made of (BuildKit runs it once for both)"
            )
        else:
            native_python_ready(job)
    _machine_image(job, tag, key, request.target.platform, accel.RUNTIME_BASE_STAGE,
                   "runtime base image", "the same packages on this base")  # fmt: skip
    job.runtime_base_image = tag
    job.build_args[accel.RUNTIME_BASE_ARG] = tag
