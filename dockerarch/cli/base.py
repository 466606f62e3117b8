"""``dockerarch base``: base images for targets."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from dockerarch import base as base_module

app = typer.Typer(help="Base images: a target's userland, bootstrapped from its distro's packages.")


@app.command("bootstrap")
def bootstrap(
    arch: Annotated[
        str | None, typer.Option("--arch", "-a", help="armv7, aarch64 or amd64; a comma list.")
    ] = None,
    target: Annotated[str | None, typer.Option("--target", "-t", help="A board target.")] = None,
    suite: Annotated[str | None, typer.Option("--suite", help="Release, e.g. bookworm.")] = None,
    mirror: Annotated[
        str | None, typer.Option("--mirror", help="Archive URI (default: the target's).")
    ] = None,
    keyring: Annotated[
        str | None, typer.Option("--keyring", help="Keyring file that signs the archive.")
    ] = None,
    include: Annotated[
        str | None, typer.Option("--include", help="Extra packages, comma-separated.")
    ] = None,
    snapshot: Annotated[
        str | None,
        typer.Option("--snapshot", help="A dated snapshot mirror URI, for reproducibility."),
    ] = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Rebuild even when cached.")] = False,
    push: Annotated[
        bool, typer.Option("--push/--no-push", help="Also push to the registry of registry.yaml.")
    ] = True,
) -> None:
    """Bootstrap the base image of a target with mmdebstrap under QEMU, load it, push it."""
    from dockerarch import base
    from dockerarch.config import load_registry_config
    from dockerarch.errors import DockerarchError
    from dockerarch.progress import Board
    from dockerarch.targets import load_targets, select_targets

    extra = [p.strip() for p in (include or "").split(",") if p.strip()]
    registry = load_registry_config().address if push else None
    boards = select_targets(load_targets(), arch=arch, target=target)
    requests = [
        base.make_request(
            board, suite=suite, mirror=mirror, keyring=keyring, include=extra, snapshot=snapshot
        )
        for board in boards
    ]  # every request first: a bad one stops the run before anything starts
    for request in requests:
        typer.echo(
            f"{request.target.name}: {request.tag} ({request.target.platform}) from "
            f"{request.snapshot or request.mirror} {request.suite}",
            err=True,
        )
    outcomes: dict[str, base_module.BaseResult | DockerarchError] = {}

    def one(request: base_module.BaseRequest, board: Board) -> None:
        name = request.target.name
        board.start(name)

        def show(line: str) -> None:
            if line.startswith(("W:", "E:")):
                board.say(name, line)  # mmdebstrap's warnings and errors stay on screen
            else:
                board.step(name, _words(line))

        try:
            result = base.bootstrap(request, refresh=refresh, push_to=registry, progress=show)
        except DockerarchError as exc:
            outcomes[name] = exc
            board.end(name, "failed")
        else:
            outcomes[name] = result
            board.end(name, f"{'cached' if result.cached else 'made'} in {result.seconds:.0f} s")

    # Several arches at once, each with its own line: emulated mmdebstraps are mostly one core
    # each, and the amd64 one is short.
    with Board(r.target.name for r in requests) as board:
        threads = [threading.Thread(target=one, args=(r, board), daemon=True) for r in requests]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # wakes up for Ctrl-C
    failed: list[DockerarchError] = []
    for request in requests:
        outcome = outcomes[request.target.name]
        if isinstance(outcome, DockerarchError):
            failed.append(outcome)
            typer.echo(outcome.render(), err=True)
        else:
            _report(request.target.name, outcome)
    if failed:
        raise typer.Exit(max(e.exit_code for e in failed))


def _words(line: str) -> str:
    """An mmdebstrap progress line ("I: installing essential packages...") as words."""
    return line.removeprefix("I: ").removesuffix("...").strip()


def _progress(name: str) -> Callable[[str], None]:
    """Progress lines on stderr, each prefixed with the target and the seconds elapsed."""
    started = time.monotonic()

    def show(line: str) -> None:
        typer.echo(f"  {name} {time.monotonic() - started:6.1f}s  {line}", err=True)

    return show


def _report(name: str, result: base_module.BaseResult) -> None:
    how = "cached" if result.cached else "made"
    pushed = f", pushed {result.pushed}" if result.pushed else ""
    typer.echo(
        f"{name}: {how} {result.tag} {result.image_id[:19]} in {result.seconds:.1f} s{pushed}"
    )
    if result.note:
        typer.echo(f"{name}: {result.note}", err=True)


@app.command("import-img")
def import_img(
    image: Annotated[
        Path, typer.Argument(help="The SD-card image: .img, .img.zip, .img.xz or .img.gz.")
    ],
    target: Annotated[
        str, typer.Option("--target", "-t", help="The board target it is the base of.")
    ],
    partition: Annotated[
        int | None,
        typer.Option("--partition", help="Partition number (default: the largest Linux one)."),
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", help="Image tag (default: the target's base image).")
    ] = None,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Import again even when cached.")
    ] = False,
    push: Annotated[
        bool, typer.Option("--push/--no-push", help="Also push to the registry of registry.yaml.")
    ] = True,
) -> None:
    """Import the root partition of a board's SD-card image as the target's base, read-only,
    with owners, modes, links, xattrs and capabilities intact."""
    from dockerarch import base
    from dockerarch.config import load_registry_config
    from dockerarch.targets import load_targets, select_targets

    boards = select_targets(load_targets(), arch=None, target=target)
    if len(boards) != 1:
        from dockerarch.errors import UsageError

        raise UsageError(
            f"base import-img makes the base of one target, not {len(boards)} ({target})",
            fix="Give one --target, the board the SD-card image is for: import it once per "
            "target if several boards share it.",
        )
    (board,) = boards
    registry = load_registry_config().address if push else None
    progress = _progress(board.name)
    request = base.make_image_import(board, image, partition=partition, tag=tag, progress=progress)
    typer.echo(
        f"{board.name}: {request.tag} ({board.platform}) from {image} sha256:{request.image_sha256[:16]}",
        err=True,
    )
    _report(
        board.name, base.import_image(request, refresh=refresh, push_to=registry, progress=progress)
    )


@app.command("ls")
def list_bases(
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """List the base images: platform, size, creation time and source."""
    import json

    from dockerarch.base import LABEL_PREFIX, local_bases
    from dockerarch.cli.output import columns

    images = local_bases()
    rows: list[dict[str, Any]] = [
        {
            "tags": [t for t in i.tags if not t.startswith(tuple("0123456789"))] or list(i.tags),
            "platform": i.platform,
            "size_mb": round(i.size / 1e6, 1),
            "created": i.created,
            "source": i.labels.get(f"{LABEL_PREFIX}.source", "?"),
            "target": i.labels.get(f"{LABEL_PREFIX}.target", "?"),
            "id": i.id,
        }
        for i in images
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("No base images yet: dockerarch base bootstrap --arch armv7 makes one.")
        return
    table = [("IMAGE", "PLATFORM", "SIZE", "CREATED", "SOURCE")]
    for r in rows:
        table.append((",".join(r["tags"]) or r["id"][:19], r["platform"], f"{r['size_mb']} MB",
                      r["created"], r["source"]))  # fmt: skip
    typer.echo(columns(table))
