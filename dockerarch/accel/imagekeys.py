"""The keys of a hybrid build's machine images: the toolchain image by what its native stages are
made from, the runtime base by its base and what its stage reads; and a stage's text in a
rendered Dockerfile.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from dockerarch.accel.decision import CONTEXT_DIR

# The stages a hybrid build takes from this machine's toolchain image (buildsteps.toolchain_image)
# in place of building them: the x86-64 Python of the emulated stages' installs, the cross
# toolchain's tree collected from its packages, and the image's own stage (the Python and the
# tree: the last, the one the image is made of). The layout's stage `toolchain` is FROM the
# image named by TOOLCHAIN_ARG, or by default the stage built in the same Dockerfile.
NATIVE_STAGES = ("native-python-stage", "toolchain-wheels", "toolchain-tree", "toolchain-stage")
TOOLCHAIN_ARG = "DOCKERARCH_TOOLCHAIN"
# The first of them is an image of its own too, the native Python image (40 MB over the amd64
# base, the toolchain image's lower layers): the stages that need only the Python (the emulated
# stages' apt steps) take it from there, and need not wait for the toolchain image. The layout's
# stage `native-python` is FROM the image NATIVE_PYTHON_ARG names.
NATIVE_PYTHON_STAGE = NATIVE_STAGES[0]
NATIVE_PYTHON_ARG = "DOCKERARCH_NATIVE_PYTHON"


# The files of the toolchain's context NATIVE_STAGES read (collect-toolchain copies and compiles
# these into the image; native-wheels runs there). The context's other scripts (apt-install,
# pip-install, the libraries check, ...) are bound by the build's own stages each time: editing
# one of them makes no new toolchain image.
TOOLCHAIN_FILES = ("collect-toolchain", "farm-client", "toolchain-id", "dockerarch-cc.c", "use-native-drivers",
                   "dockerarch_native_python.py", "dockerarch_native_backend.py",
                   "native-wheels", "collect-python32")  # fmt: skip
# A stage NATIVE_STAGES are made from too, when the Dockerfile has it (32-bit targets).
NATIVE_PYTHON32_STAGE = "native-python32-stage"


def toolchain_key(dockerfile: str, context: Path, base_id: str) -> str:
    """The sha256 of everything NATIVE_STAGES are made from: their text in the rendered
    Dockerfile (the apt packages, uv's version, the drivers, the collect step), the files of
    the toolchain's context they read (TOOLCHAIN_FILES), and the amd64 base's image id. Two
    builds with the same key get the same stages, so one image serves every recipe and target
    that shares them."""
    digest = hashlib.sha256(f"base {base_id}\n".encode())
    for name in NATIVE_STAGES:
        digest.update(f"stage {name}\n{stage_text(dockerfile, name)}\n".encode())
    if f" AS {NATIVE_PYTHON32_STAGE}\n" in dockerfile:
        text = stage_text(dockerfile, NATIVE_PYTHON32_STAGE)
        digest.update(f"stage {NATIVE_PYTHON32_STAGE}\n{text}\n".encode())
    _hash_files(digest, context / CONTEXT_DIR, TOOLCHAIN_FILES)
    return digest.hexdigest()


def native_python_key(dockerfile: str, base_id: str) -> str:
    """The sha256 of what NATIVE_PYTHON_STAGE is made from: its text (the packages; the apt
    step's scripts come from the context, but the stage runs none of them) and the amd64 base's
    image id."""
    text = stage_text(dockerfile, NATIVE_PYTHON_STAGE)
    return hashlib.sha256(
        f"base {base_id}\nstage {NATIVE_PYTHON_STAGE}\n{text}\n".encode()
    ).hexdigest()


def _hash_files(digest: hashlib._Hash, root: Path, names: Iterable[str]) -> None:
    """Each of the files ``names`` under ``root`` that is there: name, executable bits, bytes."""
    for path in sorted(p for p in (root / n for n in names) if p.is_file()):
        digest.update(
            f"file {path.relative_to(root).as_posix()} {path.stat().st_mode & 0o111:o}\n".encode()
        )
        digest.update(hashlib.sha256(path.read_bytes()).digest())


# The stage every build's runtime-base is made from (the target's base plus its runtime
# packages) and the build argument that names the machine's image of it in its place
# (buildsteps.runtime_base_image).
RUNTIME_BASE_STAGE = "runtime-base-stage"
RUNTIME_BASE_ARG = "DOCKERARCH_RUNTIME_BASE"
# The stages RUNTIME_BASE_STAGE reads in a hybrid build: the base it is FROM, the package lists
# the native apt installs from, and the stage of the x86-64 Python it byte-compiles with (the
# build takes that Python from the toolchain image, whose other stages it does not read).
RUNTIME_BASE_READS = ("target-base", "package-lists", "native-python-stage")
# The toolchain scripts those stages run: the lists' fetch, the native apt and its native
# byte-compiling (a change to any other script makes no new runtime base).
RUNTIME_BASE_FILES = ("update-lists", "apt-install", "with-native-python", "native-python")


def runtime_base_key(
    dockerfile: str, context: Path, base_id: str, native_base_id: str | None
) -> str:
    """The sha256 of everything RUNTIME_BASE_STAGE is made from: its lines (the packages), the
    lines of the stages it reads, the toolchain scripts they run (RUNTIME_BASE_FILES), and the
    image ids of the target base and of the amd64 base under the native Python. The same key
    is the same image: every recipe whose artifacts need the same packages on the same base
    shares it."""
    own = stage_text(dockerfile, RUNTIME_BASE_STAGE)
    digest = hashlib.sha256(f"base {base_id}\nstage {RUNTIME_BASE_STAGE}\n{own}\n".encode())
    for name in RUNTIME_BASE_READS:
        if f" AS {name}\n" in dockerfile:
            digest.update(f"stage {name}\n{stage_text(dockerfile, name)}\n".encode())
    if native_base_id is not None:  # only its Python is used: not the toolchain's other stages
        digest.update(f"native base {native_base_id}\n".encode())
    if "--mount=type=bind,source=" in own:  # a hybrid build's apt step: the scripts it runs
        _hash_files(digest, context / CONTEXT_DIR, RUNTIME_BASE_FILES)
    return digest.hexdigest()


def stage_text(dockerfile: str, name: str) -> str:
    """The lines of stage ``name`` (its FROM line up to the next stage's), comments left out."""
    lines: list[str] = []
    inside = False
    for line in dockerfile.splitlines():
        if line.startswith("FROM "):
            inside = line.split()[-1] == name and line.split()[-2].upper() == "AS"
        if inside and not line.startswith("#"):
            lines.append(line)
    if not lines:
        raise ValueError(f"the Dockerfile has no stage {name}")
    return "\n".join(lines)
