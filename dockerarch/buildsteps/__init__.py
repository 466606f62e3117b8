"""The steps of a build job, in order: each a small function of the job's state.

A job (build.Job) makes a temporary directory beside its result and runs :data:`STEPS` on a
:class:`JobState`; each step is timed, and the times go to manifest.json. The steps talk to the
Docker engine only through :class:`Engine` (the ``engine`` module in a real build, a fake in unit
tests), and to the user only through the state's progress callbacks.

"""

from __future__ import annotations

from collections.abc import Callable

from dockerarch.buildsteps.bases import base_ready, ensure_base
from dockerarch.buildsteps.compile import (
    build_artifacts,
    prepare_context,
    push_cache,
    use_farm,
    verify,
)
from dockerarch.buildsteps.images import (
    native_python_ready,
    pushes_done,
    runtime_base_image,
    toolchain_image,
    toolchain_landed,
    toolchain_ready,
)
from dockerarch.buildsteps.manifest import write_manifest
from dockerarch.buildsteps.runtime import SMOKE_TIMEOUT, image_tag, runtime_image, smoke_test
from dockerarch.buildsteps.state import (
    BuildOptions,
    BuildStepFailed,
    BuildStopped,
    DiskFull,
    Engine,
    JobState,
    SmokeFailed,
)

STEPS: tuple[tuple[str, Callable[[JobState], None]], ...] = (
    ("ensure base", ensure_base),
    ("prepare context", prepare_context),
    ("toolchain image", toolchain_image),
    ("base ready", base_ready),
    ("runtime base image", runtime_base_image),
    ("toolchain ready", toolchain_ready),
    ("farm", use_farm),
    ("build artifacts", build_artifacts),
    ("toolchain kept", toolchain_landed),
    ("verify", verify),
    ("push cache", push_cache),
    ("runtime image", runtime_image),
    ("smoke test", smoke_test),
    ("machine images pushed", pushes_done),
    ("manifest", write_manifest),
)


__all__ = [
    "SMOKE_TIMEOUT",
    "STEPS",
    "BuildOptions",
    "BuildStepFailed",
    "BuildStopped",
    "DiskFull",
    "Engine",
    "JobState",
    "SmokeFailed",
    "base_ready",
    "build_artifacts",
    "ensure_base",
    "image_tag",
    "native_python_ready",
    "prepare_context",
    "push_cache",
    "pushes_done",
    "runtime_base_image",
    "runtime_image",
    "smoke_test",
    "toolchain_image",
    "toolchain_landed",
    "toolchain_ready",
    "use_farm",
    "verify",
    "write_manifest",
]
