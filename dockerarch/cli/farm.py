"""``dockerarch farm``: compile servers (distccd) that builds send their compiles to."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from dockerarch.cli.options import Arch, Target

app = typer.Typer(
    help="Compile farm servers: distccd with hybrid builds' own cross compilers (and amd64 "
    "builds' native ones), on any x86-64 machine with Docker; builds use them with "
    "--farm HOST[:PORT],..."
)


@app.command("serve")
def serve(
    allow: Annotated[
        list[str],
        typer.Option(
            "--allow",
            metavar="NETWORK",
            help="Clients it serves, like 10.0.0.0/24 (repeatable or comma list).",
        ),
    ],
    arch: Arch = None,
    target: Target = None,
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            metavar="ADDRESS[:PORT]",
            help="Where it listens: this machine's LAN address, or 0.0.0.0.",
        ),
    ] = "127.0.0.1",
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Compiles at once (default: its CPUs)."),
    ] = None,
    unsafe_wide: Annotated[
        bool,
        typer.Option(
            "--unsafe-allow-wide-network",
            help="Let --allow name a network wider than an IPv4 /8 or IPv6 /48: distccd has no "
            "password, so everyone there may run compilers on this machine.",
        ),
    ] = False,
) -> None:
    """Start a farm server for the targets' compilers on this machine (cross compilers for ARM
    targets, the suite's gcc for amd64), replacing one at the same address."""
    from dockerarch import farm
    from dockerarch.cli.output import say
    from dockerarch.config import parse_farm_server
    from dockerarch.targets import load_targets, select_targets

    if arch is None and target is None:
        arch = "armv7,aarch64"
    targets = select_targets(load_targets(), arch=arch, target=target)
    server = parse_farm_server(listen)
    networks = farm.check_allow(allow, wide=unsafe_wide)
    with tempfile.TemporaryDirectory(prefix="dockerarch-farm-") as work:
        started = farm.serve(targets, server, allow=networks, jobs=jobs or os.cpu_count() or 2,
                             work=Path(work), say=say)  # fmt: skip
    for name, digest in sorted(started.digests.items()):
        typer.echo(f"{name}: toolchain sha256:{digest}", err=True)
    typer.echo(f"farm server {server.address} serves {', '.join(sorted(started.digests))} "
               f"(clients from {', '.join(networks)})", err=True)  # fmt: skip
    typer.echo(f"use it: dockerarch build RECIPE --farm {server.address} (or farm: servers: in "
               "registry.yaml)", err=True)  # fmt: skip
    typer.echo(server.address)


@app.command("ls")
def list_servers(
    servers: Annotated[
        list[str] | None,
        typer.Argument(metavar="[HOST[:PORT],...]", help="Other servers to check too."),
    ] = None,
) -> None:
    """This machine's farm servers, registry.yaml's and those named: their toolchains and
    whether they answer."""
    from dockerarch import farm
    from dockerarch.cli.output import columns
    from dockerarch.config import load_registry_config, parse_farm_servers

    rows = [("SERVER", "WHERE", "ACCEPTS", "TOOLCHAINS", "STATUS")]
    here = farm.running()
    for r in here:
        status = "answers" if r.running and farm.answers(r.server) else "DOWN"
        toolchains = ", ".join(f"{t} sha256:{d[:16]}" for t, d in sorted(r.digests.items()))
        accepts = ", ".join(r.allow) or "unknown (started by an older dockerarch)"
        rows.append(
            (r.server.address, f"this machine ({r.container})", accepts, toolchains, status)
        )
    mine = {r.server.address for r in here}
    named = parse_farm_servers(servers or [])
    for server, where in [*((s, "named") for s in named),
                          *((s, "registry.yaml") for s in load_registry_config().farm)]:  # fmt: skip
        if server.address in mine:
            continue
        mine.add(server.address)
        status = "answers" if farm.answers(server) else "DOWN"
        rows.append((server.address, where, "its own --allow", "checked by each build", status))
    if len(rows) == 1:
        typer.echo("no farm servers: start one with dockerarch farm serve --listen ADDRESS "
                   "--allow NETWORK", err=True)  # fmt: skip
        return
    typer.echo(columns(rows))


@app.command("stop")
def stop(
    servers: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ADDRESS[:PORT]]...", help="Which (default: all of this machine's)."
        ),
    ] = None,
) -> None:
    """Stop this machine's farm servers."""
    from dockerarch import farm
    from dockerarch.config import parse_farm_servers

    stopped = farm.stop(parse_farm_servers(servers or []))
    for r in stopped:
        typer.echo(f"stopped farm server {r.server.address} ({r.container})")
    if not stopped:
        typer.echo("no farm server was running", err=True)
