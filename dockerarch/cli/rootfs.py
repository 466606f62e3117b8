"""``dockerarch export-rootfs`` and ``dockerarch chroot``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from dockerarch.cli import options as cli_options
from dockerarch.cli.output import say as _say


def export_rootfs(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[RECIPE] [DEST]",
            help="The recipe whose runtime image to export (not with --image), then DEST, where "
            "the tree goes (not with --tarball).",
        ),
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Export any local image of the target's platform.")
    ] = None,
    target: Annotated[str | None, typer.Option("--target", "-t", help="The board target.")] = None,
    arch: Annotated[str | None, typer.Option("--arch", "-a", help="armv7 or aarch64.")] = None,
    version: Annotated[str | None, typer.Option("--version", "-V", help="Recipe version.")] = None,
    package: Annotated[
        str | None, typer.Option("--package", "-p", help="wheel recipe: what was built.")
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where build put its results.")] = Path(
        "dist"
    ),
    requirement: cli_options.Requirement = None,
    set_name: cli_options.SetName = None,
    client: Annotated[
        str, typer.Option("--client", help="Who may mount it: a network (CIDR), a host, or *.")
    ] = "*",
    server: Annotated[
        str, typer.Option("--server", help="This machine's address as the boards reach it.")
    ] = "SERVER",
    hostname: Annotated[str, typer.Option("--hostname", help="The board's host name.")] = "board",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing DEST.")] = False,
    caps_as_setuid: Annotated[
        bool,
        typer.Option(
            "--caps-as-setuid",
            help="NFS carries no file capabilities: make such files setuid root instead.",
        ),
    ] = False,
    tarball: Annotated[
        Path | None,
        typer.Option("--tarball", help="Write the tree as one tar (owners by number, xattrs)."),
    ] = None,
) -> None:
    """Turn a build's runtime image (or --image) into a root filesystem a board boots over NFS."""
    from dockerarch import engine, rootfs
    from dockerarch.errors import UsageError
    from dockerarch.targets import load_targets, select_targets

    example = ("Like: dockerarch export-rootfs wheel --package 'zstandard==0.23.0' --target "
               "debian-aarch64 /srv/nfs/pynq, or --image REF --target T DEST.")  # fmt: skip
    args = list(args or [])
    wanted = (0 if image else 1) + (0 if tarball else 1)
    if len(args) != wanted:
        raise UsageError(
            f"export-rootfs takes {'no RECIPE with --image' if image else 'a RECIPE'} and "
            f"{'no DEST with --tarball' if tarball else 'a DEST'}: {len(args)} given",
            fix=example,
        )
    recipe = None if image else args[0]
    dest = None if tarball else Path(args[-1])
    boards = select_targets(load_targets(), arch=arch, target=target)
    if len(boards) != 1:
        raise UsageError("export-rootfs exports for one target", fix="Give one --target or --arch.")
    board = boards[0]
    options = rootfs.ExportOptions(client=client, server=server, hostname=hostname, force=force,
                                   caps_as_setuid=caps_as_setuid)  # fmt: skip
    options.check()  # all of it before the engine is asked anything
    the_set = cli_options.userland_set(requirement, set_name, image)
    if dest is not None:
        rootfs.check_replaceable(Path(os.path.abspath(dest)), force)
    engine.daemon_info()
    from dockerarch.publish import userland_image

    ref = userland_image(board, recipe=recipe, image=image, version=version, package=package,
                         out=out, wanted=the_set)  # fmt: skip
    if tarball is not None:
        done = rootfs.write_tarball(ref, tarball.absolute(), options, say=_say)
    else:
        assert dest is not None
        done = rootfs.export(ref, dest, options, say=_say)
    typer.echo(str(done.dest))
    for change in done.changes:
        _say(change)
    if done.capabilities:
        fate = ("made setuid root instead (--caps-as-setuid): " if done.setuid_from_caps
                else "NFS carries no file capabilities, so over NFS these lose theirs (ping breaks: "
                "piserver#130; --caps-as-setuid makes them setuid root instead): ")  # fmt: skip
        _say(fate + ", ".join(done.capabilities))
    boot = done.boot if tarball is None else done.dest.parent
    prefix = "" if tarball is None else done.dest.name + "."
    _say(f"{done.files} paths, checked against the image; exported in {done.seconds:.1f} s")
    for name, what in (("exports", "/etc/exports line"), ("cmdline.txt", "Raspberry Pi cmdline.txt"),
                       ("uboot.txt", "PYNQ U-Boot bootargs")):  # fmt: skip
        path = boot / f"{prefix}{name}"
        typer.echo(f"{what} ({path}):", err=True)
        typer.echo("    " + path.read_text().strip().replace("\n", "\n    "), err=True)
    if tarball is None:
        typer.echo(f"on a board, without rebooting: sh board-chroot {server}:{done.dest} "
                   f"(the script is {done.dest / rootfs.BOARD_SCRIPT})", err=True)  # fmt: skip


def chroot(
    args: Annotated[
        list[str] | None,
        typer.Argument(help="DEST (not with --image), then -- and the command; none: a shell."),
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Enter a throw-away tree of this image.")
    ] = None,
    bind: Annotated[
        list[str] | None,
        typer.Option("--bind", metavar="SRC:DST", help="Bind a host directory in; repeatable."),
    ] = None,
    device: Annotated[
        list[str] | None,
        typer.Option(
            "--device", metavar="NAME", help="A /dev node to add (e.g. vchiq); repeatable."
        ),
    ] = None,
) -> None:
    """A shell (or a command, whose exit code it returns) inside an ARM root filesystem."""
    from dockerarch import chroot as chroot_module
    from dockerarch.errors import UsageError

    rest = list(args or [])
    binds = [chroot_module.parse_bind(b) for b in bind or []]
    devices = (*chroot_module.DEFAULT_DEVICES, *(device or []))
    if image is not None:
        from dockerarch import engine

        engine.daemon_info()
        code = chroot_module.run_image(image, rest, binds=binds, devices=devices, say=_say)
    else:
        if not rest:
            raise UsageError("Give the tree to enter (DEST) or --image REF",
                             fix="Like: dockerarch chroot /srv/nfs/pynq -- python3 -V")  # fmt: skip
        code = chroot_module.run(Path(rest[0]), rest[1:], binds=binds, devices=devices)
    raise typer.Exit(code)
