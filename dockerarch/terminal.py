"""What dockerarch writes to the user's terminal, made safe to show."""

from __future__ import annotations

# C0 controls but tab and newline, DEL and the C1 controls: each written as \xNN.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (9, 10)}


def printable(text: str) -> str:
    """``text`` as the terminal should show it: literally. What a build prints and writes (a
    package's own output, the names in its logs, a smoke test's last line) is hostile input, and
    an escape sequence in it would act on the user's terminal (retitle it, rewrite what is on
    screen, hide the lines before it): every control character but tab and newline is written
    as ``\\xNN`` instead."""
    return text.translate(_CONTROLS)
