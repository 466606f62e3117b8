"""Where dockerarch finds its own files: through the package, whether installed or editable."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockerarch import paths
from dockerarch.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_editable_checkout_uses_its_top_level_recipes() -> None:
    assert paths.builtin_root() == REPO
    assert paths.data_path("targets.yaml").is_file()
    assert (paths.data_path("toolchain") / "collect-toolchain").is_file()


def test_installed_layout_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site-packages" / "dockerarch"
    for kind in paths.BUILTIN_KINDS:
        (package / "_builtin" / kind).mkdir(parents=True)
    monkeypatch.setattr(paths, "_package_dir", lambda: package)
    paths.builtin_root.cache_clear()
    try:
        assert paths.builtin_root() == package / "_builtin"
        monkeypatch.chdir(tmp_path)
        assert paths.template_dirs() == [package / "_builtin" / "dockerfiles"]
        (tmp_path / "dockerfiles").mkdir()  # a project's own recipes come first
        assert paths.template_dirs() == [
            tmp_path / "dockerfiles",
            package / "_builtin" / "dockerfiles",
        ]
    finally:
        paths.builtin_root.cache_clear()


def test_missing_recipes_say_how_to_reinstall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paths, "_package_dir", lambda: tmp_path / "lib" / "dockerarch")
    paths.builtin_root.cache_clear()
    try:
        with pytest.raises(ConfigError, match="Reinstall dockerarch"):
            paths.builtin_root()
    finally:
        paths.builtin_root.cache_clear()
