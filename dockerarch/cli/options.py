"""Options that several commands share, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Source = Annotated[
    str | None,
    typer.Option(
        "--source",
        metavar="PATH",
        help="The upstream source from this machine (a checkout or a .tar.gz/.tar.xz/.zip) "
        "instead of a git clone: qpulib, vaccel, torch, torchvision.",
    ),
]

# What `push` and `upload` publish: the same selection as the build that made it.
Recipe = Annotated[str, typer.Argument(help="Recipe name (dockerarch recipes lists them).")]
Arch = Annotated[str | None, typer.Option("--arch", "-a", help="armv7, aarch64, or a comma list.")]
Target = Annotated[
    str | None, typer.Option("--target", "-t", help="Board targets, e.g. rpi3,pynq-zu.")
]
Version = Annotated[str | None, typer.Option("--version", "-V", help="Recipe version.")]
Package = Annotated[
    str | None, typer.Option("--package", "-p", help="wheel recipe: what was built.")
]
Settings = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", metavar="KEY=VALUE", help="Recipe options, as built."),
]
Out = Annotated[Path, typer.Option("--out", "-o", help="Where build put its results.")]
