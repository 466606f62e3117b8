"""``dockerarch prune``: remove this machine's toolchain images, native Python images and runtime
bases no build has used for a while."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from dockerarch.machineimages import DEFAULT_UNUSED_DAYS


def prune(
    unused_for: Annotated[
        float,
        typer.Option(
            "--unused-for",
            min=0,
            metavar="DAYS",
            help="Remove those no build has used for this many days.",
        ),
    ] = DEFAULT_UNUSED_DAYS,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Remove the toolchain images, their native Python images and runtime bases (about 0.6 GB,
    0.2 GB and 0.2 GB each, the base's layers shared) that builds make once and share, when no
    build has used them for --unused-for days: each new dockerarch, re-bootstrapped base or
    package list makes new ones and leaves the old. Bases, build results and runtime images are
    not touched; the next build that needs a removed image makes it again."""
    from dockerarch import machineimages
    from dockerarch.cli.output import columns

    now = time.time()
    done = machineimages.prune(unused_for, dry_run=dry_run, now=now)
    if as_json:
        rows = [{"tag": m.tag, "kind": m.kind, "size": m.size,
                 "days_unused": round(m.days_unused(now), 1)} for m in done.removed]  # fmt: skip
        kept = [{"tag": m.tag, "why": why} for m, why in done.kept]
        typer.echo(json.dumps({"dry_run": dry_run, "removed": rows, "kept": kept,
                               "freed": 0 if dry_run else done.freed}, indent=2))  # fmt: skip
    elif done.removed:
        table = [("WOULD REMOVE" if dry_run else "REMOVED", "KIND", "SIZE", "UNUSED")]
        table += [(m.tag, m.kind, machineimages.gigabytes(m.size),
                   f"{m.days_unused(now):.0f} days") for m in done.removed]  # fmt: skip
        typer.echo(columns(table))
        total = machineimages.gigabytes(sum(m.size for m in done.removed))
        typer.echo(f"{len(done.removed)} image{'s' * (len(done.removed) != 1)}, "
                   + (f"{total} (dry run: nothing removed)" if dry_run
                      else f"up to {total} freed"))  # fmt: skip
    else:
        typer.echo(f"Nothing to remove: every toolchain image and runtime base was used by a "
                   f"build in the last {unused_for:g} days.")  # fmt: skip
    for image, why in done.kept:
        typer.echo(f"kept {image.tag}: {why}", err=True)
    if done.kept:
        raise typer.Exit(1)
