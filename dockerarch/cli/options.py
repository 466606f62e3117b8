"""Options that several commands share, declared once."""

from __future__ import annotations

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
