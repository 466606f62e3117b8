"""A build stopped half-way through its compile step (Ctrl-C, or the command and its buildx
killed outright) and run again with the same command continues: what was compiled before comes
from ccache (its cache mount outlives the stopped step), only the rest is compiled, and the
result is what an uninterrupted build makes."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from .conftest import dockerarch
from .test_drivers import elf_shape

UNITS = 24  # about 1.5 s of gcc -O2 each: half of them done before the stop
RECIPE = """\
description: a C library of many files built with cmake and ninja, for the tests
versions: {known: ["1.0"], default: "1.0"}
artifacts: [tarball]
apt: [build-essential, cmake, ninja-build]
smoke: [many-check]
"""
TEMPLATE = """\
{% extends "_partials/layout.Dockerfile.j2" %}
{% import "_partials/macros.j2" as m with context %}
{% block build %}
COPY src /src/many
RUN {{ m.compile_mounts(trail=" ") }}cmake -S /src/many -B /src/many/build -G Ninja -DCMAKE_BUILD_TYPE=Release \\
 && cmake --build /src/many/build -j 2 \\
 && DESTDIR=/stage cmake --install /src/many/build --prefix /usr/local \\
 && tar -C /stage --sort=name --owner=0 --group=0 --numeric-owner -czf /out/many-1.0.tar.gz .
{% endblock %}
"""
CMAKELISTS = """\
cmake_minimum_required(VERSION 3.13)
project(many C)
file(GLOB UNITS ${CMAKE_CURRENT_SOURCE_DIR}/unit*.c)
add_library(many SHARED ${UNITS})
add_executable(many-check main.c)
target_link_libraries(many-check many)
install(TARGETS many many-check)
"""


def unit(n: int, salt: int) -> str:
    """A translation unit gcc -O2 takes a while over: many small functions, each unrolled. The
    salt makes it new to ccache, whose cache mount outlives test runs on one machine."""
    body = "\n".join(
        f"static int f{n}_{k}(int x) {{ int s = {k} + {salt};"
        f" for (int i = 0; i < 64; i++) s = s * 31 + (x ^ i) + {k}; return s; }}"
        for k in range(400)
    )
    calls = " + ".join(f"f{n}_{k}(x)" for k in range(400))
    return f"{body}\nint unit{n}(int x) {{ return {calls}; }}\n"


def many_project(path: Path, salt: int) -> Path:
    src = path / "contexts" / "many" / "src"
    src.mkdir(parents=True)
    (path / "contexts" / "many" / "recipe.yaml").write_text(RECIPE)
    (src / "CMakeLists.txt").write_text(CMAKELISTS)
    for n in range(UNITS):
        (src / f"unit{n:02d}.c").write_text(unit(n, salt))
    decls = "".join(f"int unit{n}(int);\n" for n in range(UNITS))
    total = " + ".join(f"unit{n}(1)" for n in range(UNITS))
    (src / "main.c").write_text(
        f'#include <stdio.h>\n{decls}int main(void) {{ printf("units {UNITS} %d\\n", {total} != 0);'
        " return 0; }\n"
    )
    (path / "dockerfiles").mkdir()
    (path / "dockerfiles" / "many.Dockerfile.j2").write_text(TEMPLATE)
    return path


STOPS = {
    # Ctrl-C in the terminal: dockerarch stops buildx, keeps the log so far, removes its work
    "ctrl-c": lambda proc: proc.send_signal(signal.SIGINT),
    # a closed SSH session or the OOM killer: the command and its buildx die on the spot, and
    # nothing of dockerarch runs to clean up
    "sigkill": lambda proc: os.killpg(proc.pid, signal.SIGKILL),
    # buildx alone killed (the OOM killer's usual pick): dockerarch says so, and that a new
    # run continues
    "kill-buildx": lambda proc: _kill_buildx(proc.pid),
}


def _kill_buildx(pid: int) -> None:
    """SIGKILL the docker-buildx processes among ``pid``'s descendants."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    for child in map(int, children.split()):
        _kill_buildx(child)
        try:
            if "buildx" in Path(f"/proc/{child}/cmdline").read_text():
                os.kill(child, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass


def build_until_half(project: Path, out: Path, stop: str) -> str:
    """`dockerarch build` as a user runs it, stopped (``STOPS``) once its compile step has said
    it is half-way; its standard error."""
    command = [sys.executable, "-m", "dockerarch", "build", "many", "--arch", "armv7",
               "--out", str(out)]  # fmt: skip
    # SIGINT as a terminal gives it, whatever this suite's own was (a background job's is
    # ignored, and an ignored signal stays ignored across exec)
    proc = subprocess.Popen(
        command, cwd=project, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stderr is not None
    said = []
    # A build that stops printing is killed at the deadline by a timer, not found when (if ever)
    # its next line comes.
    fired: list[bool] = []

    def kill() -> None:
        fired.append(True)
        os.killpg(proc.pid, signal.SIGKILL)

    watchdog = threading.Timer(1800, kill)
    watchdog.start()
    try:
        for line in proc.stderr:
            said.append(line)
            count = re.search(r"compiling many with cmake \[(\d+)/(\d+)\]", line)
            if count and int(count.group(1)) * 2 >= int(count.group(2)):
                STOPS[stop](proc)
                break
    finally:
        watchdog.cancel()
    assert not fired, "not half-way after 30 minutes, killed:\n" + "".join(said)
    _, rest = proc.communicate(timeout=300)
    expected = {"ctrl-c": 130, "sigkill": -signal.SIGKILL, "kill-buildx": 6}[stop]
    assert proc.returncode == expected, "".join(said) + (rest or "")
    if stop == "ctrl-c":
        # buildx stopped before dockerarch ended: BuildKit hands a step still running to any
        # build that asks for it, and the run started next would join the cancelled one
        assert not in_session(proc.pid), in_session(proc.pid)
        assert "Interrupted. Stopped what it had started." in rest
    return "".join(said) + (rest or "")


def in_session(sid: int) -> list[str]:
    """The processes still running in session ``sid`` (the command's and all it started)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            comm, fields = stat.read_text().rsplit(")", 1)
        except (OSError, ValueError):
            continue
        if fields.split()[3] == str(sid) and fields.split()[0] != "Z":
            left.append(comm.split("(", 1)[1])
    return left


def tarball(out: Path) -> dict[str, bytes]:
    (path,) = (out / "debian-armv7" / "many-1.0").glob("*.tar.gz")
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def _base() -> None:
    done = dockerarch("base", "bootstrap", "--arch", "armv7", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("stop", sorted(STOPS))
def test_a_build_stopped_half_way_compiles_only_the_rest_when_run_again(
    _base: None, tmp_path: Path, stop: str
) -> None:
    project = many_project(tmp_path, secrets.randbelow(1 << 30))
    out = project / "dist"
    said = build_until_half(project, out, stop)
    assert "Traceback" not in said
    results = out / "debian-armv7"
    interrupted = results / "many-1.0.interrupted.log"
    assert not (results / "many-1.0").exists()  # nothing half-written landed
    if stop == "kill-buildx":
        assert re.search(r"docker buildx (was killed \(signal 9\)|ended with exit code \d+) while "
                         r"compiling many with cmake, with no build step failing",
                         " ".join(said.split())), said  # fmt: skip
        assert "the build continues where it stopped" in " ".join(said.split())
        # a failed build's log, not an interrupted one's
        os.replace(results / "many-1.0.failed.log", interrupted)
    if stop == "sigkill":  # nothing ran to clean up: the work directory is still there
        assert not interrupted.exists()
        assert [p.name for p in results.glob(".many-1.0.*.tmp")], list(results.iterdir())

    again = dockerarch("build", "many", "--arch", "armv7", "--out", str(out), cwd=project,
                       timeout=3600)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    if stop == "sigkill":  # the run after cleans up, and says where the killed run's log is
        assert "an earlier run of this build was killed" in " ".join(again.stderr.split())
    assert not list(results.glob(".many-1.0.*")), list(results.iterdir())
    log = interrupted.read_text()
    # ninja prints an object's line when it is compiled: what the stopped build had finished.
    finished = set(re.findall(r"Building C object CMakeFiles/many\.dir/(unit\d+\.c)\.o", log))
    assert UNITS // 3 <= len(finished) < UNITS, sorted(finished)
    data = json.loads((out / "debian-armv7" / "many-1.0" / "manifest.json").read_text())
    hybrid = data["hybrid"]
    # Every unit finished before the stop came from ccache; only the rest was compiled (cmake's
    # own probes of the compiler may add a few either way).
    assert hybrid["ccache_hits"] >= len(finished), hybrid
    assert hybrid["ccache_misses"] <= UNITS - len(finished) + 4, hybrid
    assert f"ccache: {hybrid['ccache_hits']} of" in " ".join(again.stderr.split())
    assert data["smoke"] == f"units {UNITS} 1"

    if stop != "sigkill":
        return  # one uninterrupted build to compare with is enough: the most abrupt stop's
    # The same files, symbols and sections as a build that was never stopped (no ccache).
    whole = project / "whole"
    done = dockerarch("build", "many", "--arch", "armv7", "--no-ccache", "--out", str(whole),
                      cwd=project, timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    resumed, uninterrupted = tarball(out), tarball(whole)
    assert sorted(resumed) == sorted(uninterrupted)
    for name, data_ in resumed.items():
        if data_[:4] == b"\x7fELF":
            assert elf_shape(data_) == elf_shape(uninterrupted[name]), name
