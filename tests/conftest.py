from __future__ import annotations

import getpass
import tempfile
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/integration drives the real engine and is marked so."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)


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
