"""fetch-sdist, the native sdist download of hybrid builds: which file it picks from an index's
listing (its downloads from a served index are tests/integration/test_fetch_sdist.py)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util

import pytest
from packaging.requirements import Requirement

from dockerarch import accel

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
    chosen = fetch_sdist.select(FILES, Requirement(requirement))
    assert (chosen["filename"] if chosen else None) == expected
