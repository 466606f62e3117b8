"""Unit tests never start a process and never open a socket: any attempt fails loudly instead of
reaching Docker or the network. Tests that need root (file capabilities, device nodes, other
owners) are marked ``root`` and say so where those privileges are missing."""

from __future__ import annotations

import os
import socket
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


class SocketOpenedInUnitTest(AssertionError):
    pass


def _no_socket(*args: Any, **kwargs: Any) -> NoReturn:
    raise SocketOpenedInUnitTest("a unit test tried to open a socket; move it to tests/integration")


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "socket", _no_socket)
    monkeypatch.setattr(socket, "socketpair", _no_socket)
    monkeypatch.setattr(socket, "create_connection", _no_socket)
    monkeypatch.setattr(socket, "getaddrinfo", _no_socket)


# chown (0), fowner (3), mknod (27), setfcap (31): what writing a root filesystem's files needs
_ROOT_CAPS = (0, 3, 27, 31)


def _has_root_caps() -> bool:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("CapEff:"))
    effective = int(line.split()[1], 16)
    return all(effective >> bit & 1 for bit in _ROOT_CAPS)


@pytest.fixture(autouse=True)
def _root_marked(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("root")
    if marker is not None and not _has_root_caps():
        pytest.skip(
            f"needs root: {marker.args[0] if marker.args else 'privileged file operations'}"
        )


@pytest.fixture(autouse=True)
def _own_state_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """dockerarch's state directory (/var/lib/dockerarch: bases' temporary trees, the record of
    the machine images builds used) is a fresh one per test, never the machine's."""
    from dockerarch import base

    monkeypatch.setattr(base, "STATE_DIR", tmp_path_factory.mktemp("state"))
