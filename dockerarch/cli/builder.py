"""``dockerarch builder``: native ARM builder nodes."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    help="Native ARM builder nodes: builds for their platforms run there, not under QEMU."
)


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="A name for the node.")],
    endpoint: Annotated[
        str,
        typer.Argument(help="ssh://USER@HOST, tcp://HOST:PORT, unix:///PATH or a docker context."),
    ],
    platform: Annotated[
        list[str],
        typer.Option("--platform", help="A platform it builds natively; repeatable or comma list."),
    ],
    host_key: Annotated[
        str | None,
        typer.Option(
            "--host-key",
            help="ssh:// nodes: the fingerprint (SHA256:...) of the node's host key, read on the "
            "node itself; pinned in your known_hosts. Not needed when ssh knows the node already.",
        ),
    ] = None,
) -> None:
    """Register a native node (a Docker engine on an ARM machine)."""
    from dockerarch import builders
    from dockerarch.cli.output import say

    platforms = [p.strip() for item in platform for p in item.split(",") if p.strip()]
    node = builders.add(name, platforms, endpoint, host_key=host_key, say=say)
    why = builders.answers(node)
    typer.echo(f"added {node.name}: {', '.join(node.platforms)} at {node.endpoint}")
    if why:
        typer.echo(f"warning: {node.name} does not answer yet ({why}); builds routed to it fail "
                   "until it does, unless --fallback-qemu.", err=True)  # fmt: skip


@app.command("ls")
def list_nodes() -> None:
    """Each builder: its platforms, endpoint and whether it answers."""
    from dockerarch import builders, engine
    from dockerarch.cli.output import columns

    rows = [("NAME", "PLATFORMS", "ENDPOINT", "STATUS")]
    local = engine.current_builder()
    emulated = [p for p in local.platforms if p in builders.NATIVE_PLATFORMS]
    rows.append(
        (builders.LOCAL, ", ".join(emulated) + " (QEMU), linux/amd64", engine.docker_host(), "ok")
    )
    for node in builders.nodes():
        why, version = builders.probe(node)
        old = builders.too_old(version) if why is None else None
        status = (
            f"DOWN: {why}" if why else f"CANNOT BUILD: {old}" if old else f"ok (Docker {version})"
        )
        rows.append((node.name, ", ".join(node.platforms), node.endpoint, status))
    typer.echo(columns(rows))


@app.command("rm")
def remove(name: Annotated[str, typer.Argument(help="The node's name.")]) -> None:
    """Forget a node: its platforms build locally again."""
    from dockerarch import builders

    builders.remove(name)
    typer.echo(f"removed {name}")
