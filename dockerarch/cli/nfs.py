"""``dockerarch nfs serve|stop|ls``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Serve exported trees over NFS to boards.", no_args_is_help=True)


@app.command("serve")
def serve(
    dest: Annotated[Path, typer.Argument(help="A tree export-rootfs wrote.")],
    client: Annotated[
        str, typer.Option("--client", help="Who may mount it: a network (CIDR), a host, or *.")
    ] = "*",
    nfs3: Annotated[
        bool, typer.Option("--nfs3", help="Serve NFSv3 too (U-Boot, klibc): starts rpcbind.")
    ] = False,
) -> None:
    """Export DEST read-write (no root squash) with the kernel's NFS server, or nfs-ganesha."""
    from dockerarch import nfs

    done = nfs.serve(dest, client=client, nfs3=nfs3)
    typer.echo(f"serving {done.path} to {done.client} with {done.server} "
               f"(NFSv{'3 and v4' if done.nfs3 else '4'})")  # fmt: skip
    typer.echo(f"a board mounts it: mount -t nfs -o vers={'3' if done.nfs3 else '4.2'} "
               f"SERVER:{done.path} /mnt", err=True)  # fmt: skip


@app.command("stop")
def stop(
    dest: Annotated[Path | None, typer.Argument(help="The exported tree.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Stop every export.")] = False,
) -> None:
    """Stop exporting DEST (or --all)."""
    from dockerarch import nfs
    from dockerarch.errors import UsageError

    if (dest is None) == (not all_):
        raise UsageError("Give DEST or --all", fix="dockerarch nfs ls lists the exports.")
    for e in nfs.stop(None if all_ else dest):
        typer.echo(f"stopped {e.path}")


@app.command("ls")
def ls() -> None:
    """The exports dockerarch serves."""
    from dockerarch import nfs
    from dockerarch.cli.output import columns

    exports = nfs.load()
    if not exports:
        typer.echo("No exports: dockerarch nfs serve DEST makes one.")
        return
    rows = [("PATH", "CLIENT", "SERVER", "NFS", "SINCE", "STATUS")]
    for e in exports:
        rows.append((e.path, e.client, e.server, "3,4" if e.nfs3 else "4", e.since,
                     "serving" if nfs.running(e) else "DOWN"))  # fmt: skip
    typer.echo(columns(rows))
