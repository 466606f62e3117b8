"""A build never compiles the previous build's files. buildx sends a local context incrementally,
into what it kept of the last context of the same directory name, skipping files whose path, size
and mtime match (docker/buildx#3232). Sdists stamp their files with fixed times and dockerarch
named every job's context `context`: two sdists whose pyproject.toml differ only in one letter of
the name (the test index's d and a) gave a's build d's pyproject.toml, and a wheel named
dockerarch_settest_d holding a's code (found running test_wheelset alone after the suite; by hand:
`build wheel -r` of d, then of a, --no-cache, armv7). Each context dockerarch writes now has a
name of its own (files.context_name)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockerarch.pipconfig import default_index

from .conftest import dockerarch
from .settest_index import A, D, serve, write_index

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("ctxindex")
    write_index(root)
    with serve(root) as url:
        yield url


def test_a_build_never_takes_the_last_build_s_files_of_equal_size_and_time(
    index: str, tmp_path: Path
) -> None:
    # --no-cache: the compile steps run (nothing comes from BuildKit's cache), from the context
    # as it was sent
    wheels = {}
    for name in (D, A):
        out = tmp_path / name
        out.mkdir()
        (out / "requirements.txt").write_text(f"{name}\n")
        done = dockerarch("build", "wheel", "-r", str(out / "requirements.txt"), "--index-url",
                          index, "--extra-index-url", default_index(), "--arch", "armv7",
                          "--out", str(out), "--no-cache", timeout=1800)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        result = name.replace("-", "_") + "-1.0"
        (wheels[name],) = (out / "debian-armv7" / result).glob("*.whl")
    assert wheels[D].name == "dockerarch_settest_d-1.0-py3-none-any.whl"
    assert wheels[A].name == "dockerarch_settest_a-1.0-cp311-cp311-linux_armv7l.whl"
    with zipfile.ZipFile(wheels[A]) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert "Name: dockerarch-settest-a\n" in archive.read(metadata).decode()
