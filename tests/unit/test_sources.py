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
    with pytest.raises(UsageError, match=r"holds no torch/csrc/Module\.cpp"):
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
        {"pytorch-v2.3.1/setup.py": b"", "pytorch-v2.3.1/torch/csrc/Module.cpp": b""},
    )
    found = check_source(str(archive), recipe)
    assert found.archive and found.top == "pytorch-v2.3.1" and len(found.sha256 or "") == 64
    work = tmp_path / "work"
    work.mkdir()
    assert (context_dir(found, work) / "setup.py").is_file()
    flat = _tar(tmp_path / "flat.tar.gz", {"setup.py": b"", "torch/csrc/Module.cpp": b""})
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
        archive.writestr("torch/csrc/Module.cpp", "")
        archive.writestr("../escape", "x")
    with pytest.raises(UsageError, match=r"would land outside the source tree: \.\./escape"):
        check_source(str(evil), recipe)  # refused before any work, not when unpacked
    assert not (tmp_path / "escape").exists()


def _tar_with(path: Path, member: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo("src/torch/csrc/Module.cpp")
        archive.addfile(info, io.BytesIO(b""))
        archive.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_member("src/../../escape"), "src/../../escape"),
        (_member("/etc/cron.d/x"), "/etc/cron.d/x"),
        (_member("src/up", tarfile.SYMTYPE, "../../../etc"), "src/up"),
        (_member("src/abs", tarfile.SYMTYPE, "/etc/passwd"), "src/abs"),
        (_member("src/hard", tarfile.LNKTYPE, "../../etc/passwd"), "src/hard"),
        (_member("src/dev", tarfile.CHRTYPE), "src/dev"),
    ],
)
def test_an_archive_reaching_outside_its_tree_is_refused_by_the_check(
    tmp_path: Path, member: tarfile.TarInfo, why: str
) -> None:
    archive = _tar_with(tmp_path / "src.tar.gz", member)
    with pytest.raises(UsageError) as caught:
        check_source(str(archive), load_recipes()["torch"])
    assert f"would land outside the source tree: {why} (" in caught.value.problem


def test_a_link_inside_the_tree_is_fine(tmp_path: Path) -> None:
    archive = _tar_with(
        tmp_path / "src.tar.gz", _member("src/alias.cpp", tarfile.SYMTYPE, "torch/csrc/Module.cpp")
    )
    assert check_source(str(archive), load_recipes()["torch"]).top == "src"


def test_dotted_names_keep_their_dot(tmp_path: Path) -> None:
    """./.torch/csrc/Module.cpp is in the hidden folder .torch, not the marker's torch/."""
    recipe = load_recipes()["torch"]
    hidden = _tar(tmp_path / "hidden.tar.gz", {"./.torch/csrc/Module.cpp": b"", "./setup.py": b""})
    with pytest.raises(UsageError, match=r"holds no torch/csrc/Module\.cpp at its root"):
        check_source(str(hidden), recipe)
    dotted = _tar(tmp_path / "dotted.tar.gz", {"./torch/csrc/Module.cpp": b"", "./setup.py": b""})
    assert check_source(str(dotted), recipe).top == ""


def test_generate_refuses_an_archive_reaching_outside_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from .cli import run

    archive = _tar_with(tmp_path / "src.tar.gz", _member("src/../../escape"))
    code, out, err = run(["generate", "torch", "--arch", "armv7", "--source", str(archive)], capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    assert "would land outside the source tree" in " ".join(err.split())
