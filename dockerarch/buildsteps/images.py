"""The steps that give a hybrid build its machine images: the toolchain image (the native
stages) and the runtime base, each made once per machine under its key.
"""

from __future__ import annotations

import threading
import time

from dockerarch import (
    accel,
    machineimages,
)
from dockerarch.buildsteps.state import JobState, stream
from dockerarch.engine import BuildSpec

_IMAGE_LOCKS: dict[str, threading.Lock] = {}  # one build of each machine image at a time


def _machine_image(job: JobState, tag: str, platform: str, stage: str, what: str,
                   shared: str) -> None:  # fmt: skip
    """Build ``stage`` of the job's Dockerfile into the engine as ``tag``, unless it is there
    (one build of a tag at a time: a set's members may ask for it together)."""
    with _IMAGE_LOCKS.setdefault(tag, threading.Lock()):
        if job.engine.image_labels(tag) is None:
            spec = BuildSpec(context_dir=job.context, platform=platform, stage=stage,
                             load_tag=tag, secrets=job.secrets, cache=job.options.cache,
                             build_contexts=job.contexts, allow=job.allow)  # fmt: skip
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
