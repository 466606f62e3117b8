from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/integration drives the real engine and is marked so."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)


def pytest_configure(config: pytest.Config) -> None:
    """This machine's pip configuration is not an input of these tests (a set resolves from
    pip's configured indexes as pip would): every test and every dockerarch it runs sees none,
    and the tests of reading it write their own (PIP_CONFIG_FILE)."""
    os.environ["PIP_CONFIG_FILE"] = os.devnull
    for variable in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        os.environ.pop(variable, None)


def pytest_sessionstart(session: pytest.Session) -> None:
    """pytest removes the temporary trees of earlier runs (pyproject keeps one run's failures):
    a root filesystem or NFS export a killed run left mounted there would be deleted through.
    Refuse to start until it is unmounted."""
    root = Path(
        session.config.option.basetemp
        or Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"
    )
    mounts = Path("/proc/self/mountinfo")
    if not mounts.exists():
        return
    live = [
        line.split()[4].replace("\\040", " ")
        for line in mounts.read_text().splitlines()
        if line.split()[4].startswith(f"{root}/")
    ]
    if live:
        raise pytest.UsageError(
            f"{len(live)} mount(s) are left under {root} by an earlier run (first: {live[0]}); "
            "pytest would delete through them when it cleans old temporary trees. Unmount them "
            f"(umount -R {live[0]}) and run again."
        )
