"""The hybrid build's compiler driver (data/toolchain/dockerarch-cc.c) outside an image: built
with this machine's gcc, ccache in its place a program that records what it was asked to run.
What the driver hands ccache is what a build's compile becomes: a compile asking for no
dependency file gets one of the driver's own (ccache's depend mode), one that asks for its own
keeps it alone, and one whose options come from a response file (@FILE: CMake's and Meson's
long command lines) gets nothing added, since the file may hold a -MF of its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.integration
SOURCE = REPO / "dockerarch" / "data" / "toolchain" / "dockerarch-cc.c"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the driver, named gcc; the file the stand-in ccache writes its argv to)."""
    root = tmp_path_factory.mktemp("dockerarch-cc")
    asked = root / "asked"
    ccache = root / "ccache"
    ccache.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {asked}\n')
    ccache.chmod(0o755)
    gcc = root / "gcc"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", f'-DCCACHE="{ccache}"',
                    '-DTRIPLET="arm-linux-gnueabihf"', '-DGCC_MAJOR="12"', "-o", str(gcc),
                    str(SOURCE)], check=True)  # fmt: skip
    return gcc, asked


def run(driver: tuple[Path, Path], *args: str, cwd: Path) -> list[str]:
    gcc, asked = driver
    env = {**os.environ, "CCACHE_DEPEND": "1", "DOCKERARCH_TOOLCHAIN_LOG": str(cwd / "log")}
    subprocess.run([str(gcc), *args], check=True, cwd=cwd, env=env)
    return asked.read_text().splitlines()


def test_a_compile_without_a_dependency_file_gets_one_of_the_drivers_own(
    driver: tuple[Path, Path], tmp_path: Path
) -> None:
    got = run(driver, "-c", "x.c", "-o", "x.o", cwd=tmp_path)
    assert got[0] == "/usr/bin/arm-linux-gnueabihf-gcc-12" and got[1:5] == [
        "-c",
        "x.c",
        "-o",
        "x.o",
    ]
    assert got[5:7] == ["-MD", "-MF"] and got[7].startswith("/tmp/dockerarch-cc-deps.")
    assert not Path(got[7]).exists()  # removed after the compile: the build sees nothing new


def test_a_compile_with_its_own_dependency_file_keeps_it_alone(
    driver: tuple[Path, Path], tmp_path: Path
) -> None:
    got = run(driver, "-c", "x.c", "-o", "x.o", "-MD", "-MF", "x.d", cwd=tmp_path)
    assert got.count("-MF") == 1 and got[-1] == "x.d"


def test_a_response_file_gets_no_second_dependency_file(
    driver: tuple[Path, Path], tmp_path: Path
) -> None:
    (tmp_path / "x.rsp").write_text("-MD -MF x.d -o x.o\n")
    got = run(driver, "-c", "x.c", "@x.rsp", cwd=tmp_path)
    assert got[1:] == ["-c", "x.c", "@x.rsp"]
