"""fetch-sdist, the native sdist download of hybrid builds: which file it picks from an index's
listing (its downloads from a served index are tests/integration/test_fetch_sdist.py)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from dockerarch import accel, simple_api

SDIST = b"not really a tarball, but bytes with a known sha256"


def _load():
    loader = importlib.machinery.SourceFileLoader("fetch_sdist", str(accel.DATA / "fetch-sdist"))
    spec = importlib.util.spec_from_loader("fetch_sdist", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


fetch_sdist = _load()


def _file(name: str, *, yanked: bool = False, sha: str | None = None) -> dict[str, object]:
    return {"filename": name, "url": f"../../files/{name}",
            "hashes": {"sha256": sha or hashlib.sha256(SDIST).hexdigest()}, "yanked": yanked}  # fmt: skip


FILES = [
    _file("demo-pkg-1.0.tar.gz"),
    _file("demo_pkg-1.1.zip"),
    _file("demo_pkg-1.1.tar.gz"),
    _file("demo_pkg-1.2.tar.gz", yanked=True),
    _file("demo_pkg-2.0rc1.tar.gz"),
    _file("demo_pkg-1.1-cp311-cp311-linux_aarch64.whl"),
    _file("demo_pkg-1.3.tar.gz", sha="0" * 64),
]


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ("demo-pkg", "demo_pkg-1.3.tar.gz"),  # newest final release, whatever its name spelling
        ("Demo.Pkg>=1.0,<1.3", "demo_pkg-1.1.tar.gz"),  # .tar.gz before .zip; 1.2 is yanked
        ("demo_pkg==1.2", "demo_pkg-1.2.tar.gz"),  # pinned: yanked files still count
        ("demo-pkg==1.0", "demo-pkg-1.0.tar.gz"),
        ("demo-pkg>=2.0rc1", "demo_pkg-2.0rc1.tar.gz"),  # pre-releases when asked for
        ("demo-pkg>=3", None),
        ("other-pkg", None),
    ],
)
def test_select(requirement: str, expected: str | None) -> None:
    # the page read by dockerarch's one reader of index pages, as fetch-sdist reads it
    body = json.dumps({"files": FILES}).encode()
    listing = simple_api.parse_project_page(
        body, simple_api.SIMPLE_JSON, "http://127.0.0.1:9/s/demo-pkg/"
    )
    chosen = fetch_sdist.select(listing, Requirement(requirement))
    assert (chosen.filename if chosen else None) == expected


def test_a_build_context_carries_the_reader_beside_fetch_sdist(tmp_path) -> None:  # type: ignore[no-untyped-def]
    accel.prepare_context(tmp_path)
    beside = tmp_path / accel.CONTEXT_DIR
    assert (beside / "fetch-sdist").is_file()
    assert (beside / "simple_api.py").read_bytes() == Path(simple_api.__file__).read_bytes()


def _tarball(path, members: dict[str, bytes | str]):  # type: ignore[no-untyped-def]
    """A .tar.gz of ``members``: bytes are files, a str a symlink's target."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            if isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_an_sdist_is_unpacked_as_a_tree_of_a_fixed_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The build runs in TREE whatever the archive's top directory is called, with the
    archive's file times (compilers record the directory; wheels record the times)."""
    archive = _tarball(tmp_path / "demo_pkg-1.1.tar.gz", {
        "demo_pkg-1.1/setup.py": b"setup()\n", "demo_pkg-1.1/src/m.c": b"int m;\n",
        "demo_pkg-1.1/src/link.c": "m.c",
    })  # fmt: skip
    tree = tmp_path / "sdists" / "demo-pkg" / "src"
    (tree / "stale").mkdir(parents=True)  # an earlier unpack's leftovers go
    fetch_sdist.unpack(archive, tree)
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*")) == [
        "setup.py", "src", "src/link.c", "src/m.c"]  # fmt: skip
    assert (tree / "src" / "m.c").stat().st_mtime == 1700000000
    assert not list(tree.parent.glob(".*part"))


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ({"../evil.c": b"x"}, "points outside"),
        ({"/etc/evil": b"x"}, "points outside"),
        ({"pkg/setup.py": b"x", "pkg/up": "../../etc/passwd"}, "points outside"),
        ({"pkg/setup.py": b"x", "other/setup.py": b"y"}, "exactly one top-level directory"),
    ],
)
def test_an_sdist_that_would_escape_its_tree_is_refused(tmp_path, members, problem) -> None:  # type: ignore[no-untyped-def]
    archive = _tarball(tmp_path / "bad-1.0.tar.gz", members)
    tree = tmp_path / "out" / "src"
    with pytest.raises(ValueError, match=problem):
        fetch_sdist.unpack(archive, tree)
    assert not tree.exists() and not (tmp_path / "etc").exists()
    assert list((tmp_path / "out").iterdir()) == []  # nothing half-unpacked is left
