"""``dockerarch bundle``: neural networks into Cortex-M bundles (Glow), checked and proven."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dockerarch.cli.output import say as _say

if TYPE_CHECKING:
    from dockerarch.mcu.profiles import Mcu as McuProfile

app = typer.Typer(
    help="Compile an ONNX model into a Glow bundle for a Cortex-M, check it against the MCU and "
    "prove it on QEMU against onnxruntime.",
    no_args_is_help=True,
)

Mcu = Annotated[
    str, typer.Option("--mcu", "-m", help="cortex-m7, cortex-m4 or imxrt1060 (its RAM and flash).")
]
Ram = Annotated[
    str | None,
    typer.Option("--ram", help="The RAM the bundle may use, like 512K (default: the MCU's)."),
]
Flash = Annotated[
    str | None, typer.Option("--flash", help="The flash it may use, like 2M (default: the MCU's).")
]


def _mcu(name: str, ram: str | None, flash: str | None) -> McuProfile:
    from dockerarch.mcu import profiles

    mcu = profiles.get(name)
    return mcu.with_memory(
        profiles.parse_size(ram, "--ram") if ram is not None else None,
        profiles.parse_size(flash, "--flash") if flash is not None else None,
    )


def _glow_image() -> str:
    """The image `dockerarch build glow` makes (its runtime image's tag)."""
    from dockerarch.buildsteps.runtime import image_tag
    from dockerarch.render import plan

    (request,) = plan("glow", arch="amd64", target=None, version=None, package=None, settings={})
    return image_tag(request, request.target.name)


def make(
    model: Annotated[Path, typer.Argument(help="The ONNX model (opset 13 or lower, fixed sizes).")],
    mcu: Mcu = "cortex-m7",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="The bundle's directory (default: NAME-MCU).")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="The network's C name.")] = "net",
    ram: Ram = None,
    flash: Flash = None,
    image: Annotated[
        str | None,
        typer.Option("--image", help="Glow's image (default: what `dockerarch build glow` made)."),
    ] = None,
    prove: Annotated[
        bool,
        typer.Option("--prove/--no-prove", help="Run it on QEMU against onnxruntime (default)."),
    ] = True,
) -> None:
    """Compile MODEL into a bundle for a Cortex-M (object, header, weights, firmware kit)."""
    from dockerarch.mcu import bundle

    chosen = _mcu(mcu, ram, flash)
    target = out or Path(f"{name}-{chosen.name}")
    result = bundle.make(model, chosen, target, image=image or _glow_image(), network=name,
                         prove_it=prove, say=_say)  # fmt: skip
    _report(target, result)


def check(
    directory: Annotated[
        Path, typer.Argument(help="A bundle's directory (model-compiler's -emit-bundle).")
    ],
    mcu: Mcu = "cortex-m7",
    model: Annotated[
        Path | None,
        typer.Option("--model", help="The ONNX model it was made from: prove it on QEMU too."),
    ] = None,
    ram: Ram = None,
    flash: Flash = None,
) -> None:
    """Check a bundle against an MCU (and with --model, prove it on QEMU)."""
    from dockerarch.mcu import bundle

    chosen = _mcu(mcu, ram, flash)
    found = bundle.find(directory)
    result = bundle.check(found, chosen)
    _say(bundle.summary(result, chosen))
    extra: dict[str, Any] = {}
    if model is not None:
        extra["proof"] = bundle.prove(found, chosen, model, say=_say)
    bundle.write_manifest(found, chosen, result, extra)
    _report(directory, result | extra)


def _report(directory: Path, result: dict[str, Any]) -> None:
    proof = result.get("proof")
    if proof:
        worst = max(proof["max_abs_error"].values(), default=0.0)
        _say(f"proved on QEMU's {proof['emulator']} in {proof['seconds']} s: outputs equal "
             f"onnxruntime's (largest difference {worst:.2g})")  # fmt: skip
    _say(f"bundle: {directory} (manifest.json{', firmware/' if proof else ''})")
