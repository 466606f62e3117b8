"""Every error a user can cause or meet, each with its own exit code.

An error's message is one short paragraph: what failed, then what to do about it. The CLI's
``main`` is the one place that turns these into exits (see ``dockerarch.cli``); tracebacks are
shown only with ``--debug``.
"""

from __future__ import annotations

import textwrap

from dockerarch.terminal import printable


class DockerarchError(Exception):
    """Base of every expected failure. ``exit_code`` is what the process exits with."""

    exit_code = 1

    def __init__(self, problem: str, *, fix: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem.rstrip()
        self.fix = fix.rstrip() if fix else None

    @property
    def message(self) -> str:
        text = self.problem
        if not text.endswith((".", "!", "?", ":")):
            text += "."
        if self.fix:
            text += " " + self.fix
        return text

    def render(self, width: int = 100) -> str:
        """The one paragraph shown to the user, wrapped to ``width``; shown literally (a failed
        build's error quotes the build's own lines, which may hold escape sequences)."""
        return printable(
            textwrap.fill(
                f"error: {self.message}",
                width=width,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )

    def __str__(self) -> str:
        return self.message


class UsageError(DockerarchError):
    """The command line asked for something that does not exist or does not fit."""

    exit_code = 2


class ConfigError(DockerarchError):
    """A configuration file (registry.yaml, targets, recipes) is missing or malformed."""

    exit_code = 3


class EngineError(DockerarchError):
    """The Docker engine, buildx or a builder node did not answer or refused."""

    exit_code = 4


class ToolMissingError(DockerarchError):
    """A program dockerarch needs is not installed."""

    exit_code = 5


class OutputError(DockerarchError):
    """A result cannot be written where the user asked (sysexits' EX_CANTCREAT)."""

    exit_code = 73


class CommandFailedError(DockerarchError):
    """An external command ran and failed."""

    exit_code = 6

    def __init__(
        self,
        problem: str,
        *,
        fix: str | None = None,
        returncode: int | None = None,
        output: str = "",
    ) -> None:
        super().__init__(problem, fix=fix)
        self.returncode = returncode
        self.output = output


INTERNAL_ERROR_EXIT = 70  # EX_SOFTWARE from sysexits.h: a bug in dockerarch itself
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report Ctrl-C


class Interrupted(DockerarchError):
    """Ctrl-C came while the work went on: what had not started yet does not start."""

    exit_code = INTERRUPTED_EXIT
