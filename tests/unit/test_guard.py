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


def test_unit_tests_cannot_open_sockets() -> None:
    import socket

    with pytest.raises(AssertionError, match="tried to open a socket"):
        socket.create_connection(("127.0.0.1", 5000), timeout=1)
    with pytest.raises(AssertionError, match="tried to open a socket"):
        socket.socket(socket.AF_UNIX)
