"""``dockerarch upload``: verified wheels into each target's package index, for pip on boards."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dockerarch.cli import options
from dockerarch.cli.output import say as _say


def upload(
    recipe: options.Recipe,
    arch: options.Arch = None,
    target: options.Target = None,
    version: options.Version = None,
    package: options.Package = None,
    settings: options.Settings = None,
    out: options.Out = Path("dist"),
    requirement: options.Requirement = None,
    set_name: options.SetName = None,
    archive_dir: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            metavar="DIR",
            help="For boards that reach no index: write a static index per target into DIR "
            "(PEP 503 and 691 pages, sha256 in every link) that any web server or pip "
            "--index-url file://DIR/<target>/simple/ serves as is, instead of uploading.",
        ),
    ] = None,
) -> None:
    """Publish the verified wheels of a build to each target's package index (registry.yaml's
    index:, one index per board target), checked at the door against the target's ABI, and print
    what a board runs to pip install them."""
    from dockerarch import pkgindex
    from dockerarch.base import STATE_DIR
    from dockerarch.config import load_registry_config
    from dockerarch.recipes import parse_set
    from dockerarch.render import plan

    if archive_dir is not None:
        from dockerarch.files import ensure_writable_dir

        ensure_writable_dir(archive_dir, "--archive")  # before anything is read or gated
    locks: dict[str, Path] = {}
    if requirement:
        from dockerarch.sets.wanted import SetRequest, set_requests, sets_of

        wanted = SetRequest(requirement_files=requirement, name=set_name,
                            packages=[package] if package else [])  # fmt: skip
        requests = set_requests(recipe, wanted, arch=arch, target=target,
                                settings=parse_set(settings or []))  # fmt: skip
        found = sets_of(requests, wanted, out)
        wheels = pkgindex.find_set_wheels(found)
        locks = {t.name: d / "requirements.txt" for t, d in found}
    else:
        requests = plan(
            recipe, arch=arch, target=target, version=version, package=package,
            settings=parse_set(settings or []),
        )  # fmt: skip
        wheels = pkgindex.find_wheels(requests, out)
    if archive_dir is not None:
        from dockerarch import indexarchive

        for done in indexarchive.archive(wheels, archive_dir, say=_say):
            typer.echo(str(done.path))
        for line in indexarchive.board_lines(wheels, archive_dir, locks):
            typer.echo(line, err=True)
        return
    config = load_registry_config().index
    typer.echo(f"publishing {len(wheels)} wheel{'s' if len(wheels) != 1 else ''} to "
               f"{config.server} (one index per target)", err=True)  # fmt: skip
    outcomes = pkgindex.upload(wheels, config, state_dir=STATE_DIR, say=_say)
    for outcome in outcomes:
        typer.echo(f"{outcome.url}#sha256={outcome.wheel.sha256}")
    for line in pkgindex.board_lines(outcomes, config, locks):
        typer.echo(line, err=True)
