from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path

import pytest

# make test's second phase runs on pytest-xdist workers. Each group runs whole on one worker (its
# module fixtures made once; pytest_xdist_make_scheduler below), and groups go out in this
# order, the longest first, so that the workers end together (times: the phase's --durations on
# a 2-core machine). A module is its own group, except those that make or serve
# what the others of their group do too: the NFS exports' record and rpcbind's lock in /run
# (test_board, test_board_index boot boards over NFS), the requirements set's image
# (dockerarch/requirements:set-TARGET: `build wheel -r requirements.txt` in each of
# test_wheelset, test_context_transfer, test_native_backend).
SHARED_GROUPS = {
    "integration/test_board_index": "integration/test_board",
    "integration/test_context_transfer": "integration/test_wheelset",
    "integration/test_native_backend": "integration/test_wheelset",
}
LONGEST_FIRST = (  # seconds in make test's second phase, 2026-11-30 (both workers busy)
    "integration/test_wheelset",  # 1170 with test_native_backend and test_context_transfer
    "integration/test_card",  # 1118: three cards made, two boots
    "integration/test_build",  # 755 without its serial tests
    "integration/test_farm",  # 438
    "integration/test_resume",  # 415
    "integration/test_native_cython",  # 244
    "integration/test_board",  # 202 with test_board_index
    "integration/test_push",  # 178
    "integration/test_compiler_cache",  # 177
    "integration/test_install",  # 108
    "integration/test_native_backend32",  # 104
    "integration/test_import_img",  # ~90 (phase 1 until then)
)


def _group(path: str) -> str:
    """The group of the module at ``path`` (a node id's file part, or a file's path)."""
    module = "/".join(Path(path).with_suffix("").parts[-2:])
    return SHARED_GROUPS.get(module, module)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/integration drives the real engine and is marked so; the longest
    groups first (the order the workers take them in)."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)

    def rank(item: pytest.Item) -> int:
        group = _group(str(item.path))
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each module's tests keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's load-by-scope scheduling, a scope being a group above (xdist's own loadgroup marks
    groups by rewriting node ids, which pytest 9 no longer lets it do), handed out in the order
    of the collection (LONGEST_FIRST): xdist's default sorts scopes by their number of tests,
    which sent the unit modules out first and the card's module (a dozen tests, 12 minutes)
    whenever its turn came."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid.split("::", 1)[0])

    return ByGroup(config, log)


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
