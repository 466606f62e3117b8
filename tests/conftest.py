from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path

import pytest

# make test's second phase runs on pytest-xdist workers with --dist loadgroup: each group runs
# whole on one worker (its module fixtures made once), and groups go out in this order, the
# longest first, so that the workers end together (times: the serial suite's --durations on a
# 2-core machine). A module is its own group, except those that make or serve what the others
# of their group do too: the NFS exports' record (test_board, test_board_index boot boards over
# NFS), the requirements set's image (dockerarch/requirements:set-TARGET: `build wheel -r
# requirements.txt` in each of test_wheelset, test_context_transfer, test_native_backend).
SHARED_GROUPS = {
    "integration/test_board_index": "integration/test_board",
    "integration/test_context_transfer": "integration/test_wheelset",
    "integration/test_native_backend": "integration/test_wheelset",
}
LONGEST_FIRST = (
    "integration/test_card",  # ~580 s: three cards made, two boots
    "integration/test_wheelset",  # ~440 s with test_context_transfer and test_native_backend
    "integration/test_build",  # ~350 s without its serial tests
    "integration/test_board",  # ~270 s with test_board_index
    "integration/test_farm",
    "integration/test_resume",
    "integration/test_compiler_cache",
    "integration/test_native_cython",
    "integration/test_push",
    "integration/test_native_backend32",
)


def _group(item: pytest.Item) -> str:
    module = f"{item.path.parent.name}/{item.path.stem}"
    return SHARED_GROUPS.get(module, module)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/integration drives the real engine and is marked so; every test is
    in its module's group (xdist_group), the longest groups first."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
        item.add_marker(pytest.mark.xdist_group(_group(item)))

    def rank(item: pytest.Item) -> int:
        group = _group(item)
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each module's tests keep their order


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
