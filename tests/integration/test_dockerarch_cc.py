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


# distcc's own log lines (3.4) for a compile sent to a server: DISTCC_LOG is what the driver reads
DISTCC_SAYS = {
    # the server compiled it
    "served": ("exec on 127.0.0.2:3700: NAME -c x.c -o x.o\n", 0),
    # the server was gone: distcc compiled here, and the server is named as the one that failed
    "server-gone": (
        "exec on 127.0.0.2:3700: NAME -c x.c -o x.o\n"
        "ERROR: failed to connect to 127.0.0.2:3700: Connection refused\n"
        "Warning: failed to distribute x.c to 127.0.0.2:3700, running locally instead\n"
        "exec on localhost: NAME -c x.c -o x.o\n",
        0,
    ),
    # a compile error (a configure test's): the server said so, distcc retried here to show it
    "compile-error": (
        "exec on 127.0.0.2:3700: NAME -c x.c -o x.o\n"
        "ERROR: compile x.c on 127.0.0.2:3700 failed\n"
        "Warning: remote compilation of 'x.c' failed, retrying locally\n"
        "Warning: failed to distribute x.c to 127.0.0.2:3700, running locally instead\n"
        "exec on localhost: NAME -c x.c -o x.o\n"
        "ERROR: compile x.c on localhost failed\n",
        1,
    ),
}


@pytest.mark.parametrize("case", DISTCC_SAYS)
def test_where_a_farm_compile_ran_is_recorded_and_only_a_server_that_failed_is_blamed(
    case: str, tmp_path: Path
) -> None:
    said, code = DISTCC_SAYS[case]
    distcc = tmp_path / "distcc"  # writes distcc's log lines for this case, exits with its code
    (tmp_path / "says").write_text("".join(f"distcc[7] {line}\n" for line in said.splitlines()))
    distcc.write_text(f'#!/bin/sh\ncat {tmp_path / "says"} > "$DISTCC_LOG"\nexit {code}\n')
    distcc.chmod(0o755)
    (tmp_path / "hosts").write_text("127.0.0.2:3700/4,lzo localhost/2\n")
    (tmp_path / "id").write_text("ab" * 32 + "\n")
    driver = tmp_path / "dockerarch-distcc"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", f'-DDISTCC="{distcc}"',
                    f'-DFARM_HOSTS="{tmp_path / "hosts"}"', f'-DTOOLCHAIN_ID="{tmp_path / "id"}"',
                    '-DTRIPLET="x86_64-linux-gnu"', '-DGCC_MAJOR="12"', "-o", str(driver),
                    str(SOURCE)], check=True)  # fmt: skip
    log = tmp_path / "farm.log"
    done = subprocess.run([str(driver), "/usr/bin/x86_64-linux-gnu-gcc-12", "-c", "x.c", "-o", "x.o"],
                          cwd=tmp_path, env={**os.environ, "DOCKERARCH_FARM_LOG": str(log)},
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == code
    recorded = log.read_text()
    if case == "served":
        assert recorded == "127.0.0.2:3700 ok\n" and done.stderr == ""
    elif case == "server-gone":
        assert recorded == "localhost ok retried-after 127.0.0.2:3700\n"
        assert "farm server 127.0.0.2:3700 failed (failed to connect" in done.stderr
    else:  # failed everywhere: the compile's own failure, no server's
        assert recorded == "localhost failed\n" and "farm server" not in done.stderr
