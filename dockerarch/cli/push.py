"""``dockerarch push``: publish what ``build`` made, for boards to pull."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dockerarch.cli import options
from dockerarch.cli.output import say as _say

if TYPE_CHECKING:
    from dockerarch.config import RegistryConfig
    from dockerarch.publish import Built


def push(
    recipe: options.Recipe,
    arch: options.Arch = None,
    target: options.Target = None,
    version: options.Version = None,
    package: options.Package = None,
    settings: options.Settings = None,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tag", metavar="TAG", help="Another tag for the index; repeatable."),
    ] = None,
    index_tag: Annotated[
        str | None, typer.Option("--index-tag", help="The index's tag (default: the version).")
    ] = None,
    out: options.Out = Path("dist"),
    archive_dir: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            metavar="DIR",
            help="For boards that reach no registry: write a docker-load archive per target and "
            "an OCI layout of the whole index into DIR, instead of pushing.",
        ),
    ] = None,
) -> None:
    """Push each target's runtime image, then one multi-arch index that boards `docker pull`."""
    from dockerarch import engine, publish
    from dockerarch.config import load_registry_config
    from dockerarch.recipes import parse_set
    from dockerarch.render import plan

    requests = plan(
        recipe, arch=arch, target=target, version=version, package=package,
        settings=parse_set(settings or []),
    )  # fmt: skip
    engine.daemon_info()
    built = publish.find_built(requests, out)
    if archive_dir is not None:
        for written in publish.archive(built, archive_dir, say=_say):
            typer.echo(str(written.path))
            typer.echo(f"  {written.what}, sha256 {written.sha256}", err=True)
        return
    publish_built(built, load_registry_config(), index_tag=index_tag, tags=tuple(tags or ()))


def publish_built(
    built: list[Built], config: RegistryConfig, *, index_tag: str | None, tags: tuple[str, ...]
) -> None:
    """Push, then say what was published and what a board runs (shared with build --push)."""
    from dockerarch import publish

    names = ", ".join(f"{b.target.name} ({b.target.platform})" for b in built)
    typer.echo(f"publishing {built[0].name} {built[0].version} for {names} to {config.address}",
               err=True)  # fmt: skip
    done = publish.push(built, config, index_tag=index_tag, extra_tags=tags, say=_say)
    for tag in done.tags:
        typer.echo(f"{done.repository}:{tag}@{done.digest}")
    typer.echo(f"index {done.digest}: {', '.join(done.platforms)}", err=True)
    for line in publish.board_lines(done, config):
        typer.echo(line, err=True)
