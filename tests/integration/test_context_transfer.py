"""Two builds one after the other whose sources hold files of the same paths, sizes and mtimes
but different bytes (two sdists' pyproject.toml differing in one letter of the name, stamped
with the same time, as reproducible sdists are) each build their own files. buildx sends a local
context incrementally into what it kept of the last context with the same directory name,
skipping files whose path, size and mtime match (docker/buildx#3232): with dockerarch's fixed
context names the second build compiled the first one's pyproject.toml (a wheel named after the
other package, found by test_wheelset run alone after the suite)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from .conftest import dockerarch

pytestmark = pytest.mark.integration

STAMP = 1_700_000_000  # both trees' every file


def package(root: Path, letter: str) -> Path:
    src = root / f"ctx{letter}"
    files = {
        "pyproject.toml": (
            '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "dockerarch-ctxname-{letter}"\nversion = "1.0"\n'
        ),
        "setup.py": "from setuptools import setup\nsetup(packages=['ctx_pkg'])\n",
        "ctx_pkg/__init__.py": f"WHICH = '{letter}'\n",
    }
    (src / "ctx_pkg").mkdir(parents=True)
    for name, text in files.items():
        (src / name).write_text(text)
        os.utime(src / name, (STAMP, STAMP))
    return src


def test_a_build_never_takes_the_last_build_s_files_of_equal_size_and_time(
    tmp_path: Path,
) -> None:
    built = {}
    for letter in ("a", "b"):
        src = package(tmp_path, letter)
        out = tmp_path / f"out-{letter}"
        done = dockerarch("build", "wheel", "--package", str(src), "--arch", "amd64",
                          "--out", str(out), timeout=1200)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        (wheel,) = out.glob("debian-amd64/*/*.whl")
        built[letter] = wheel
    for letter, wheel in built.items():
        assert wheel.name.startswith(f"dockerarch_ctxname_{letter}-1.0-"), wheel.name
        with zipfile.ZipFile(wheel) as archive:
            assert archive.read("ctx_pkg/__init__.py").decode() == f"WHICH = '{letter}'\n"
