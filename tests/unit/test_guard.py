from __future__ import annotations

import subprocess

import pytest

from dockerarch import process


def test_unit_tests_cannot_start_processes() -> None:
    with pytest.raises(AssertionError, match="tried to start a process"):
        subprocess.run(["true"], check=False)


def test_process_run_is_refused_too() -> None:
    with pytest.raises(AssertionError, match="tried to start a process"):
        process.run(["true"])
