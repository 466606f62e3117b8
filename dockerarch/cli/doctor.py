"""``dockerarch doctor``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from dockerarch.doctor import CheckResult


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    registry_config: Annotated[
        Path | None,
        typer.Option("--registry-config", help="registry.yaml to read (default: ./registry.yaml)."),
    ] = None,
    min_free_gib: Annotated[
        float, typer.Option("--min-free-gib", min=0, help="Disk space builds need, in GiB.")
    ] = 10.0,
) -> None:
    """Check that this machine can build for ARM: engine, buildx, QEMU, registry, disk."""
    from dockerarch import __version__
    from dockerarch.config import load_registry_config
    from dockerarch.doctor import run_checks

    results = run_checks(load_registry_config(registry_config), min_free_gib=min_free_gib)
    failed = [r for r in results if r.required and not r.ok]
    if as_json:
        payload = {
            "ok": not failed,
            "dockerarch": __version__,
            "checks": [r.as_dict() for r in results],
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        typer.echo(render_table(results))
    if failed:
        raise typer.Exit(1)


def render_table(results: list[CheckResult]) -> str:
    width = max(len(r.name) for r in results)
    lines = []
    for r in results:
        mark = "ok  " if r.ok else ("skip" if r.skipped else "FAIL")
        lines.append(f"  {mark}  {r.name:<{width}}  {r.detail}")
        if not r.ok and r.fix:
            lines.append(f"  {'':4}  {'':<{width}}  fix: {r.fix}")
    passed = sum(r.ok for r in results)
    failed = [r for r in results if r.required and not r.ok]
    summary = f"{passed} of {len(results)} checks passed"
    summary += (
        "; this machine is ready to build for ARM."
        if not failed
        else (f"; {len(failed)} required check{'s' if len(failed) > 1 else ''} failed.")
    )
    return "\n".join([*lines, "", summary])
