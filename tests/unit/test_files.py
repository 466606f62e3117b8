from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dockerarch.errors import OutputError
from dockerarch.files import OWNER, abandoned_work_dirs, ensure_writable_dir, make_work_dir


def _dead_pid() -> int:
    """A process id no process has now."""
    pid = 4_194_000
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_a_killed_commands_work_directory_is_found_and_a_running_ones_is_not(
    tmp_path: Path,
) -> None:
    mine = make_work_dir(tmp_path, "torch-2.6.0")
    assert mine.name.startswith(".torch-2.6.0.") and mine.name.endswith(".tmp")
    assert (mine / OWNER).read_text() == f"{os.getpid()}\n"
    killed = make_work_dir(tmp_path, "torch-2.6.0")
    (killed / OWNER).write_text(f"{_dead_pid()}\n")
    assert abandoned_work_dirs(tmp_path, "torch-2.6.0") == [killed]


def test_only_the_named_results_directories_are_candidates(tmp_path: Path) -> None:
    for name in ("torch-2.6.0.1", "torch-2.6"):
        other = make_work_dir(tmp_path, name)
        (other / OWNER).write_text(f"{_dead_pid()}\n")
    (tmp_path / "torch-2.6.0").mkdir()  # a landed result
    (tmp_path / ".torch-2.6.0.abcdefgh.tmp").symlink_to(tmp_path / "torch-2.6.0")
    assert abandoned_work_dirs(tmp_path, "torch-2.6.0") == []
    assert abandoned_work_dirs(tmp_path / "absent", "torch-2.6.0") == []


def test_an_unclaimed_directory_is_abandoned_only_once_its_owner_had_time_to_claim_it(
    tmp_path: Path,
) -> None:
    fresh = tmp_path / ".x-1.abcdefgh.tmp"
    fresh.mkdir()
    assert abandoned_work_dirs(tmp_path, "x-1") == []
    old = time.time() - 3600
    os.utime(fresh, (old, old))
    assert abandoned_work_dirs(tmp_path, "x-1") == [fresh]


def test_checking_an_output_directory_creates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "dist" / "armv7"
    ensure_writable_dir(out, "--out")
    assert not (tmp_path / "dist").exists()
    assert list(tmp_path.iterdir()) == []


def test_an_output_directory_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dist").write_text("not a directory")
    with pytest.raises(OutputError, match="is a file, not a directory"):
        ensure_writable_dir(tmp_path / "dist" / "armv7", "--out")


def test_every_build_s_context_has_a_name_of_its_own(tmp_path: Path) -> None:
    # buildx keeps a copy of the last context sent under each directory name and skips files of
    # the same path, size and mtime: dockerarch's contexts must never share a name
    from dockerarch.files import context_name, make_work_dir

    first, second = make_work_dir(tmp_path, "pkg-1.0"), make_work_dir(tmp_path, "pkg-1.0")
    names = {context_name("context", first), context_name("context", second)}
    assert len(names) == 2 and all(n.startswith("context-") for n in names)
    assert context_name("context", first) == context_name("context", first)  # one job: one name


def test_a_linked_view_has_the_trees_files_linked_and_its_symlinks_as_they_are(
    tmp_path: Path,
) -> None:
    from dockerarch.files import linked_view

    source = tmp_path / "result"
    (source / "sub").mkdir(parents=True)
    (source / "a.whl").write_bytes(b"wheel")
    (source / "sub" / "b.txt").write_text("b")
    (source / "link").symlink_to("a.whl")
    (source / "dirlink").symlink_to("sub")
    view = linked_view(source, tmp_path / "view")
    assert (view / "a.whl").stat().st_ino == (source / "a.whl").stat().st_ino
    assert (view / "sub" / "b.txt").read_text() == "b"
    assert os.readlink(view / "link") == "a.whl" and os.readlink(view / "dirlink") == "sub"
    with pytest.raises(FileExistsError):  # a view is always new
        linked_view(source, view)
