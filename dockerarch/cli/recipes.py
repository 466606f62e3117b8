"""``dockerarch recipes``."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer


def recipes(
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """List the recipes with their versions, artifacts and targets."""
    from dockerarch.cli.output import columns
    from dockerarch.recipes import load_recipes
    from dockerarch.targets import load_targets

    targets = load_targets()
    found = load_recipes()
    rows: list[dict[str, Any]] = []
    for r in found.values():
        supported = [t.name for t in targets.values() if r.supports(t)]
        versions = (
            "--package SPEC"
            if r.needs_package
            else ", ".join(f"{v}*" if v == r.default_version else v for v in r.versions)
        )
        rows.append({
            "name": r.name, "versions": versions, "default_version": r.default_version,
            "artifacts": list(r.artifacts), "targets": supported, "options": list(r.options),
            "description": r.description, "source": str(r.source),
        })  # fmt: skip
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = [("RECIPE", "VERSIONS (* default)", "ARTIFACTS", "TARGETS", "DESCRIPTION")]
    for row in rows:
        table.append((row["name"], row["versions"], ",".join(row["artifacts"]),
                      ",".join(row["targets"]), row["description"]))  # fmt: skip
    typer.echo(columns(table))
