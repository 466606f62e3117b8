"""contexts/vaccel/build-tool: the vAccel tree, not a table of versions, decides the build system
and the version of it."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "contexts" / "vaccel" / "build-tool"
_loader = importlib.machinery.SourceFileLoader("vaccel_build_tool", str(PATH))
_spec = importlib.util.spec_from_loader("vaccel_build_tool", _loader)
assert _spec is not None
tool = importlib.util.module_from_spec(_spec)
_loader.exec_module(tool)

BOOKWORM = {"meson": (1, 0, 1), "cmake": (3, 25, 1)}


@pytest.mark.parametrize(
    ("project", "installed", "wanted"),
    [
        ("project('vaccel', 'c', meson_version : '>=1.1',", BOOKWORM, "meson>=1.1"),  # 0.7.x
        ("project('vaccel', 'c', 'cpp',\n  meson_version : '>=1.2',", BOOKWORM, "meson>=1.2"),
        ("project('vaccel', 'c', meson_version : '>= 0.63.0')", BOOKWORM, None),  # 0.6: Debian's
        ("project('v', meson_version : ['>=0.63', '<2'])", {"meson": (2, 1)}, "meson>=0.63,<2"),
        ("project('v', meson_version : '>=1.2')", {"meson": None}, "meson>=1.2"),  # none installed
        ("project('v', 'c')", BOOKWORM, None),  # no constraint: the distribution's meson
    ],
)
def test_meson_trees_ask_for_their_own_meson(
    tmp_path: Path, project: str, installed: dict, wanted: str | None
) -> None:
    (tmp_path / "meson.build").write_text(project + "\n")
    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.10)\n")
    assert tool.decide(tmp_path, installed) == ("meson", wanted)


@pytest.mark.parametrize(
    ("line", "wanted"),
    [
        ("cmake_minimum_required(VERSION 3.10)", None),  # vAccel 0.5.0
        ("CMAKE_MINIMUM_REQUIRED (VERSION 3.28...3.30)", "cmake>=3.28"),
    ],
)
def test_cmake_trees_ask_for_their_own_cmake(tmp_path: Path, line: str, wanted: str | None) -> None:
    (tmp_path / "CMakeLists.txt").write_text(f"{line}\nproject(vaccel C)\n")
    assert tool.decide(tmp_path, BOOKWORM) == ("cmake", wanted)


def test_a_tree_of_neither_and_a_bad_constraint_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"neither meson\.build nor CMakeLists\.txt"):
        tool.decide(tmp_path, BOOKWORM)
    (tmp_path / "meson.build").write_text("project('v', meson_version : 'new enough')\n")
    with pytest.raises(SystemExit, match="is not a version constraint"):
        tool.decide(tmp_path, BOOKWORM)
