"""Plain-text output of the commands: progress lines, and tables for the listing commands."""

from __future__ import annotations

from collections.abc import Sequence


def columns(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows aligned in columns; the last column is left unpadded (it holds long text)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    )


def say(line: str) -> None:
    """One progress line on stderr, indented under the command's own output."""
    import typer

    from dockerarch.terminal import printable

    typer.echo(f"  {printable(line)}", err=True)
