"""``dockerarch verify``: check artifacts against a board target, as builds do."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def verify(
    files: Annotated[list[Path], typer.Argument(help="Wheels, .debs, tarballs or ELF files.")],
    arch: Annotated[str | None, typer.Option("--arch", "-a", help="armv7 or aarch64.")] = None,
    target: Annotated[str | None, typer.Option("--target", "-t", help="A board target.")] = None,
) -> None:
    """Check that each file runs on the target: ELF machine, float ABI, wheel tag, glibc and
    libstdc++ symbol versions."""
    from dockerarch import artifacts
    from dockerarch.errors import UsageError
    from dockerarch.targets import load_targets, select_targets

    boards = select_targets(load_targets(), arch=arch, target=target)
    if len(boards) != 1:
        raise UsageError("verify checks against one target", fix="Give one --arch or --target.")
    board = boards[0]
    for path in files:
        if not path.is_file():
            raise UsageError(f"{path} does not exist or is not a file", fix="Check the path.")
        report = artifacts.verify(path, board)
        needs = ", ".join(
            f"{lib}_{v}" for lib, v in (("GLIBC", report.glibc), ("GLIBCXX", report.glibcxx)) if v
        )
        typer.echo(f"ok  {path}: {report.kind}, {report.elf_files} ELF files for {board.name}"
                   + (f", needs {needs}" if needs else ""))  # fmt: skip
