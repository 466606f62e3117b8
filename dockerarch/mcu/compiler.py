"""Glow's model-compiler, run from the image ``dockerarch build glow`` made: an ONNX model in, a
static-API bundle for one Cortex-M out. The container has no network, the model read-only, and
writes only the output directory, as the calling user."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path

from dockerarch import engine
from dockerarch.errors import CommandFailedError, UsageError
from dockerarch.mcu.profiles import Mcu

TIMEOUT = 1800  # seconds: a large network's bundle takes minutes; a hung compile is cut off


def command(mcu: Mcu, network: str, model_name: str) -> list[str]:
    return ["model-compiler", "-backend=CPU", f"-model=/model/{model_name}",
            "-emit-bundle=/bundle", f"-network-name={network}", "-bundle-api=static",
            "-target=arm", f"-mcpu={mcu.cpu}", "-float-abi=hard"]  # fmt: skip


def local_image(image: str, say: Callable[[str], None]) -> str:
    """``image`` in this machine's engine: there already, or pulled when it names a registry
    (ADDRESS/...:TAG, a colleague's push; docker's own credentials). A local name that is not
    there (dockerarch/glow:...) is never looked up on Docker Hub."""
    if engine.image_labels(image) is not None:
        return image
    first = image.split("/", 1)[0] if "/" in image else ""
    if not ("." in first or ":" in first or first == "localhost"):
        raise UsageError(
            f"The Glow image {image} is not on this machine",
            fix="Build it first: dockerarch build glow --arch amd64 --source GLOW_TREE, or give "
            "the one a colleague pushed: --image REGISTRY/dockerarch/glow:VERSION.",
        )
    say(f"pulling {image}")
    if engine.pull_image(image, "linux/amd64") is None:
        raise UsageError(f"The registry has no {image}",
                         fix="Push it from the machine that built it: dockerarch push glow "
                         "--arch amd64.")  # fmt: skip
    return image


def compile_bundle(image: str, model: Path, mcu: Mcu, network: str, out: Path) -> str:
    """Run model-compiler from ``image`` (in the engine: local_image); the bundle's files land
    in ``out`` (an empty directory). Returns its output (Glow prints little)."""
    argv = command(mcu, network, "model.onnx")
    code, output = engine.run_in_image(
        image, "linux/amd64", shlex.join(argv), timeout=TIMEOUT, network="none",
        volumes=((str(model.resolve()), "/model/model.onnx"),),
        writable=((str(out.resolve()), "/bundle"),), user=f"{os.getuid()}:{os.getgid()}",
    )  # fmt: skip
    if code != 0:
        lines = [line for line in output.strip().splitlines() if line.strip()]
        # Glow's importer and compiler stop with "Error message: WHAT" before a stack dump.
        said = next((line.split(":", 1)[1].strip() for line in lines
                     if line.startswith("Error message:")), None)  # fmt: skip
        if said:
            raise UsageError(
                f"Glow cannot compile {model.name}: {said}",
                fix="Change what it names in the model (Glow's importer takes some operators "
                "only in some shapes or opsets: an export with opset 11, or onnx-simplifier, "
                "often helps).",
            )
        raise CommandFailedError(
            f"model-compiler failed on {model.name} (exit code {code})"
            + (": " + " / ".join(lines[-4:]) if lines else ""),
            returncode=code,
            output=output,
        )
    return output
