"""``dockerarch export-img``: a card a board boots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from dockerarch.cli import options
from dockerarch.cli.output import say as _say


def export_img(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[RECIPE] OUT",
            help="The recipe whose verified result goes on the card (not with "
            "--image), then OUT, the image file to write (like pi.img).",
        ),
    ] = None,
    board: Annotated[
        str, typer.Option("--board", "-b", help="The board the card is for (rpi3b).")
    ] = "rpi3b",
    image: Annotated[
        str | None,
        typer.Option("--image", help="Put any local image of the target's platform on the card."),
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="The board target (userland).")
    ] = None,
    arch: Annotated[str | None, typer.Option("--arch", "-a", help="armv7 or aarch64.")] = None,
    version: Annotated[str | None, typer.Option("--version", "-V", help="Recipe version.")] = None,
    package: Annotated[
        str | None, typer.Option("--package", "-p", help="wheel recipe: what was built.")
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where build put its results.")] = Path(
        "dist"
    ),
    requirement: options.Requirement = None,
    set_name: options.SetName = None,
    hostname: Annotated[str, typer.Option("--hostname", help="The board's host name.")] = "board",
    user: Annotated[
        str | None, typer.Option("--user", help="The user who logs in (the board's usual one: pi).")
    ] = None,
    ssh_key: Annotated[
        Path | None,
        typer.Option(
            "--ssh-key",
            help="Public key(s) the user logs in with over ssh "
            "(default: ~/.ssh/id_ed25519.pub or id_rsa.pub).",
        ),
    ] = None,
    password_file: Annotated[
        Path | None,
        typer.Option(
            "--password-file",
            help="Also let the user log in with the password on this "
            "file's first line (none by default: keys only).",
        ),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option(
            "--size",
            help="The image's size, like 4G (default: its contents "
            "and a margin; the first boot grows the root to the card).",
        ),
    ] = None,
    compress: Annotated[
        str | None, typer.Option("--compress", help="xz or zstd: OUT.xz / OUT.zst instead of OUT.")
    ] = None,
    boot_from: Annotated[
        Path | None,
        typer.Option(
            "--boot-from",
            help="The vendor's SD-card image (PYNQ's, Raspberry Pi OS's; "
            ".img, .img.xz or .zip): its boot partition and kernel modules go on the card.",
        ),
    ] = None,
    with_: Annotated[
        list[str] | None,
        typer.Option(
            "--with",
            help="Add to the card (repeatable, or comma-separated): docker (Debian's Docker "
            "engine, started at boot, the user in its group: the board becomes a builder node for "
            "`dockerarch builder add`).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing output files.")] = False,
) -> None:
    """Turn a verified build (or --image) into an SD-card image a board boots: partitions, the
    board's firmware and kernel, the userland, the user's key; no root, the same bytes each time."""
    from dockerarch.card import boards as card_boards
    from dockerarch.card import export, layout
    from dockerarch.errors import UsageError
    from dockerarch.publish import userland_image
    from dockerarch.targets import load_targets, select_targets

    example = ("Like: dockerarch export-img wheel --package 'zstandard==0.23.0' --arch aarch64 "
               "pi.img, or --image REF --target T pi.img.")  # fmt: skip
    args = list(args or [])
    if len(args) != (1 if image else 2):
        raise UsageError(f"export-img takes {'no RECIPE with --image, and ' if image else 'a RECIPE and '}"
                         f"OUT: {len(args)} given", fix=example)  # fmt: skip
    the_board = card_boards.find_board(card_boards.load_boards(), board)
    targets = load_targets()
    if target is None and arch is None:
        target = the_board.targets[0]
    chosen = select_targets(targets, arch=arch, target=target)
    if len(chosen) != 1:
        raise UsageError(
            "export-img makes a card for one target", fix="Give one --target or --arch."
        )
    if arch is not None and target is None:  # --arch: the board's own target of that arch
        of_arch = [t for t in the_board.targets if targets[t].arch.name == chosen[0].arch.name]
        chosen = [targets[of_arch[0]]] if of_arch else chosen
    keys = ssh_key or next((p for p in (Path.home() / ".ssh" / n for n in ("id_ed25519.pub", "id_rsa.pub"))
                            if p.is_file()), None)  # fmt: skip
    if keys is None:
        raise UsageError("No ssh key to put on the card", fix="Give --ssh-key ~/.ssh/KEY.pub (ssh-keygen "
                         "-t ed25519 makes one): the card's user logs in with it.")  # fmt: skip
    request = export.CardRequest(
        board=the_board, target=chosen[0], image=image or "", out=Path(os.path.abspath(args[-1])),
        hostname=hostname, user=user or the_board.user, ssh_keys=export.read_keys(keys),
        size_mib=layout.parse_size(size) if size else 0, compress=compress, force=force,
        boot_from=Path(os.path.abspath(boot_from)) if boot_from else None,
        password_file=password_file,
        extras=tuple(w.strip() for given in with_ or [] for w in given.split(",") if w.strip()),
    )  # fmt: skip
    request.check()
    export.check_outputs(request)
    wanted = options.userland_set(requirement, set_name, image)
    ref = userland_image(chosen[0], recipe=None if image else args[0], image=image,
                         version=version, package=package, out=out, wanted=wanted)  # fmt: skip
    import dataclasses

    request = dataclasses.replace(request, image=ref)
    card = export.export(request, say=_say)
    typer.echo(str(card.path))
    _say(
        f"{card.size / 2**20:.0f} MiB card ({card.content / 2**20:.0f} MiB of files), "
        f"{card.bmap.name} and {card.manifest.name} beside it; made in {card.seconds:.1f} s"
    )
    unpack = {".xz": "xzcat", ".zst": "zstdcat"}.get(card.path.suffix)
    plain = (f"{unpack} {card.path} | dd of=/dev/sdX bs=4M conv=fsync" if unpack
             else f"dd if={card.path} of=/dev/sdX bs=4M conv=fsync")  # fmt: skip
    _say(f"write it to a card: bmaptool copy {card.path} /dev/sdX  (or: {plain})")
