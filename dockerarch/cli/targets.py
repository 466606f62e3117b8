"""``dockerarch targets`` and ``dockerarch targets show NAME``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from dockerarch.cli.output import columns

app = typer.Typer(
    help="Board targets: distro, arch, compiler and C library a build matches.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback()
def list_targets(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """List the board targets (built-in and from the project's targets.yaml)."""
    if ctx.invoked_subcommand is not None:
        return
    from dockerarch.targets import load_targets

    targets = load_targets()
    if as_json:
        typer.echo(json.dumps({n: t.resolved() for n, t in targets.items()}, indent=2))
        return
    rows = [("NAME", "ARCH", "PLATFORM", "DISTRO", "PYTHON", "GCC", "GLIBC", "DESCRIPTION")]
    for t in targets.values():
        rows.append((t.name, t.arch.name, t.platform, f"{t.distro} {t.suite}", t.python,
                     str(t.gcc), t.glibc, t.description))  # fmt: skip
    typer.echo(columns(rows))


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="A target name (dockerarch targets lists them).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Print every resolved value of one target."""
    from dockerarch.targets import find_target, load_targets

    values = find_target(load_targets(), name).resolved()
    if as_json:
        typer.echo(json.dumps(values, indent=2))
        return
    width = max(map(len, values))
    typer.echo("\n".join(f"{key:<{width}}  {value}" for key, value in values.items()))
