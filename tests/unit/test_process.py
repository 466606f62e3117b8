from __future__ import annotations

from pathlib import Path

from dockerarch import process


def _proc(root: Path, pid: int, comm: str, ppid: int) -> None:
    (root / str(pid)).mkdir()
    (root / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560\n")


def test_children_are_read_from_proc_whatever_their_names_hold(tmp_path: Path) -> None:
    _proc(tmp_path, 100, "python3", 1)
    _proc(tmp_path, 101, "docker-buildx", 100)
    _proc(tmp_path, 102, "a (tricky) name 100", 7)  # parentheses and the pid in the name
    _proc(tmp_path, 103, "mmdebstrap", 100)
    _proc(tmp_path, 104, "cc1plus", 101)  # a grandchild: its parent stops it
    (tmp_path / "self").mkdir()  # not a pid
    (tmp_path / "105").mkdir()  # vanished between listing and reading
    assert process.children_of(100, tmp_path) == [101, 103]
    assert process.children_of(7, tmp_path) == [102]
    assert process.children_of(999, tmp_path) == []
