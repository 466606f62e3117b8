"""--source: what is accepted, what is refused before anything is built, what gets recorded."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from dockerarch.errors import UsageError
from dockerarch.recipes import load_recipes
from dockerarch.sources import check_source, context_dir


def test_a_checkout_needs_the_recipe_marker(tmp_path: Path) -> None:
    recipes = load_recipes()
    (tmp_path / "meson.build").write_text("project('vaccel')\n")
    found = check_source(str(tmp_path), recipes["vaccel"])
    assert not found.archive and found.record() == {"path": str(tmp_path), "kind": "directory"}
    with pytest.raises(UsageError, match=r"holds no setup\.py"):
        check_source(str(tmp_path), recipes["torch"])
    with pytest.raises(UsageError, match="does not take --source"):
        check_source(str(tmp_path), recipes["wheel"])


def _tar(path: Path, names: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in names.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_release_archives_are_stepped_into(tmp_path: Path) -> None:
    recipe = load_recipes()["torch"]
    archive = _tar(
        tmp_path / "pytorch-v2.3.1.tar.gz",
        {"pytorch-v2.3.1/setup.py": b"", "pytorch-v2.3.1/torch/x.py": b""},
    )
    found = check_source(str(archive), recipe)
    assert found.archive and found.top == "pytorch-v2.3.1" and len(found.sha256 or "") == 64
    work = tmp_path / "work"
    work.mkdir()
    assert (context_dir(found, work) / "setup.py").is_file()
    flat = _tar(tmp_path / "flat.tar.gz", {"setup.py": b""})
    assert check_source(str(flat), recipe).top == ""
    empty = _tar(tmp_path / "other.tar.gz", {"pkg/README": b""})
    with pytest.raises(UsageError, match="below its folder pkg/"):
        check_source(str(empty), recipe)


def test_bad_archives_are_refused(tmp_path: Path) -> None:
    recipe = load_recipes()["torch"]
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not gzip")
    with pytest.raises(UsageError, match="not a readable archive"):
        check_source(str(broken), recipe)
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("setup.py", "")
        archive.writestr("../escape", "x")
    found = check_source(str(evil), recipe)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(UsageError, match="outside its root"):
        context_dir(found, work)
    assert not (tmp_path / "escape").exists()
