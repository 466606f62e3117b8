"""Progress of several concurrent jobs (one per target), readable by a person.

On a terminal: one live line per job (rich), with its elapsed time and what it does now, and
messages printed above the live lines. Without a terminal (CI logs, pipes): plain lines, each
step of a job once, each message once.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from dockerarch.terminal import printable


def clock(seconds: float) -> str:
    return f"{int(seconds // 60):2d}:{int(seconds % 60):02d}"


# Where a count with no total is said in plain output: 1, 10, 25, 50, 100, 250, 500, 1000, ...
_MILESTONES = (1, *(n * 10**e for e in range(8) for n in (10, 25, 50)))


def _milestone(done: int) -> int:
    """The last milestone ``done`` reached (0 before the first)."""
    return max((m for m in _MILESTONES if m <= done), default=0)


class Board:
    """Live or plain progress of named jobs. Thread-safe; use as a context manager."""

    def __init__(
        self, names: Iterable[str], *, stream: TextIO | None = None, live: bool | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.names = list(names)
        self.width = max((len(n) for n in self.names), default=0)
        self.live = self.stream.isatty() if live is None else live
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._steps: dict[str, str] = {name: "waiting" for name in self.names}
        self._since: dict[str, float] = {}
        self._ended: dict[str, float] = {}
        self._printed: dict[str, set[str]] = {name: set() for name in self.names}
        # plain counts printed, per job, step and count: one step may run several builds (a
        # bundled project's own [1/4] before the main [1/1326]); each counts from its start
        self._tenths: dict[tuple[str, str, int], int] = {}
        self._console = Console(file=self.stream, highlight=False, soft_wrap=True)
        self._live: Live | None = None

    def __enter__(self) -> Board:
        if self.live:
            self._live = Live(
                self._table(), console=self._console, refresh_per_second=4, transient=True,
                get_renderable=self._table,
            )  # fmt: skip
            self._live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.__exit__(kind, exc, tb)
            self._live = None
            with self._lock:  # the last state of every job stays on screen
                for name in self.names:
                    self._console.print(self._line(name, self._steps[name]), markup=False)

    def _elapsed(self, name: str) -> float:
        return self._ended.get(name, time.monotonic()) - self._since.get(name, self.started)

    def _line(self, name: str, text: str) -> str:
        return f"  {name:<{self.width}} {clock(self._elapsed(name))}  {text}"

    def _table(self) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True, justify="right")
        table.add_column(no_wrap=True, overflow="ellipsis")
        with self._lock:
            for name in self.names:
                table.add_row(
                    Text(f"  {name}", style="bold"),
                    clock(self._elapsed(name)),
                    Text(self._steps[name], style="dim" if name in self._ended else ""),
                )
        return table

    def start(self, name: str) -> None:
        """The job's clock starts now (jobs that queue start later than the board)."""
        with self._lock:
            self._since.setdefault(name, time.monotonic())

    def say(self, name: str, line: str) -> None:
        """A message about a job: printed once, above the live lines."""
        with self._lock:
            self._since.setdefault(name, time.monotonic())
            text = self._line(name, printable(line))
            if self._live is not None:
                self._live.console.print(text, markup=False)
            else:
                self.stream.write(text + "\n")
                self.stream.flush()

    def step(self, name: str, words: str) -> None:
        """What the job does now. Live: its line changes; plain: printed the first time only
        (stages that run side by side interleave their steps' lines)."""
        words = printable(words)
        with self._lock:
            self._since.setdefault(name, time.monotonic())
            self._steps[name] = words
            printed = self._printed.setdefault(name, set())
            if self._live is None and words not in printed:
                printed.add(words)
                self.stream.write(self._line(name, words) + "\n")
                self.stream.flush()

    def count(self, name: str, words: str, done: int, total: int, shown: str) -> None:
        """How far the job's step is (``shown``: "412/1217", "45%", "12 files compiled"; a
        ``total`` of 0 is not known). Live: its line follows every count; plain: a line at each
        tenth of the way, or, with no total, at 1, 10, 25, 50, 100, 250, ... so CI logs stay
        readable."""
        words = printable(words)
        text = f"{words} [{printable(shown)}]"
        with self._lock:
            self._since.setdefault(name, time.monotonic())
            if self._live is not None:
                self._steps[name] = text
                return
            tenth = min(10, done * 10 // total) if total > 0 else _milestone(done)
            if tenth <= self._tenths.get((name, words, total), -1):
                return
            self._tenths[name, words, total] = tenth
            self._steps[name] = text
            self.stream.write(self._line(name, text) + "\n")
            self.stream.flush()

    def reopen(self, name: str) -> None:
        """A job that ended starts another part (a wheel set's next member): its clock runs on
        from where it started, and its steps are said again."""
        with self._lock:
            self._ended.pop(name, None)
            self._printed.pop(name, None)
            self._tenths = {k: v for k, v in self._tenths.items() if k[0] != name}

    def end(self, name: str, words: str) -> None:
        """The job is over: its clock stops and its line says how it ended."""
        with self._lock:
            now = time.monotonic()
            self._since.setdefault(name, now)  # a job that ends before it said anything: 0:00
            self._ended.setdefault(name, now)
        self.step(name, words)
