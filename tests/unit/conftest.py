"""Unit tests never start a process: any attempt fails loudly instead of reaching Docker."""

from __future__ import annotations

import os
import subprocess
from typing import Any, NoReturn

import pytest


class ProcessStartedInUnitTest(AssertionError):
    pass


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise ProcessStartedInUnitTest(
        f"a unit test tried to start a process: {args[:1]!r}; move it to tests/integration"
    )


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "Popen", _refuse)
    monkeypatch.setattr(os, "system", _refuse)
    monkeypatch.setattr(os, "posix_spawn", _refuse)
    monkeypatch.setattr(os, "posix_spawnp", _refuse)
    monkeypatch.setattr(os, "execv", _refuse)
    monkeypatch.setattr(os, "execve", _refuse)
    monkeypatch.setattr(os, "fork", _refuse)
