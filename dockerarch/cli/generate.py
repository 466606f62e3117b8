"""``dockerarch generate``: print or write the Dockerfile a build would use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dockerarch.cli.options import Source


def generate(
    recipe: Annotated[str, typer.Argument(help="Recipe name (dockerarch recipes lists them).")],
    arch: Annotated[
        str | None, typer.Option("--arch", "-a", help="armv7 or aarch64 (aliases: armhf, arm64).")
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="A board target, e.g. rpi3, pynq-zu.")
    ] = None,
    version: Annotated[str | None, typer.Option("--version", "-V", help="Recipe version.")] = None,
    package: Annotated[
        str | None, typer.Option("--package", "-p", help="For the wheel recipe: 'NAME==VERSION'.")
    ] = None,
    source: Source = None,
    settings: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", metavar="KEY=VALUE", help="Set a recipe option; repeatable."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")
    ] = None,
    accel: Annotated[
        str,
        typer.Option(
            "--accel",
            help="'hybrid' (native cross compilers and build driver, build's default), 'compilers' or 'none'.",
        ),
    ] = "hybrid",
) -> None:
    """Render the Dockerfile for RECIPE and one target."""
    from dockerarch import accel as accel_module
    from dockerarch import paths
    from dockerarch.errors import UsageError
    from dockerarch.files import write_atomic
    from dockerarch.recipes import parse_set
    from dockerarch.render import for_generate, plan, render

    accel_module.check_mode(accel)
    requests = plan(
        recipe, arch=arch, target=target, version=version, package=package,
        settings=parse_set(settings or []), source=source, to_build=True,
    )  # fmt: skip
    if len(requests) > 1:
        raise UsageError(
            "generate renders one Dockerfile: give one arch or one target",
            fix="Run it once per target, e.g. --target debian-armv7, then --target debian-aarch64.",
        )
    text = render(for_generate(requests[0], accel), paths.template_dirs())
    if requests[0].chosen_because:
        typer.echo(requests[0].chosen_because, err=True)
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_atomic(output, text.encode())
        typer.echo(f"wrote {output}", err=True)
