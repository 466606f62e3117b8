"""The native build driver of hybrid builds: a cmake + ninja project with the feature checks big
projects make (headers, symbols, type sizes, a NEON compile check, a try_run, a compiler flag),
built for both arches with the driver native (`--accel hybrid`, the default) and emulated
(`--accel compilers`). Nothing may change but time: the same CMakeCache.txt entry for entry,
the same detected processor, the same files, the same dynamic symbols and loadable sections."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from .conftest import dockerarch
from .shapes import elf_shape

RECIPE = """\
description: a cmake + ninja project with feature checks, for the tests
versions: {known: ["1.0"], default: "1.0"}
artifacts: [tarball]
apt: [build-essential, cmake, ninja-build]
smoke: [show-facts]
"""
TEMPLATE = """\
{% extends "_partials/layout.Dockerfile.j2" %}
{% import "_partials/macros.j2" as m with context %}
{% block build %}
COPY src /src/facts
RUN {{ m.compile_mounts(trail=" ") }}cmake -S /src/facts -B /src/facts/build -G Ninja -DCMAKE_BUILD_TYPE=Release \\
 && cmake --build /src/facts/build \\
 && DESTDIR=/stage cmake --install /src/facts/build --prefix /usr/local \\
 && install -D -m 0644 /src/facts/build/CMakeCache.txt /stage/usr/local/share/facts/CMakeCache.txt \\
 && install -D -m 0644 /src/facts/build/CMakeFiles/*/CMakeSystem.cmake /stage/usr/local/share/facts/CMakeSystem.cmake \\
 && tar -C /stage --sort=name --owner=0 --group=0 --numeric-owner -czf /out/facts-1.0.tar.gz .
{% endblock %}
"""
CMAKELISTS = r"""
cmake_minimum_required(VERSION 3.13)
project(facts C CXX)
include(CheckIncludeFile)
include(CheckSymbolExists)
include(CheckTypeSize)
include(CheckCSourceCompiles)
include(CheckCSourceRuns)
include(CheckCXXCompilerFlag)
check_include_file(arm_neon.h HAVE_ARM_NEON_H)
check_include_file(sys/auxv.h HAVE_SYS_AUXV_H)
check_include_file(immintrin.h HAVE_IMMINTRIN_H)
check_symbol_exists(getauxval sys/auxv.h HAVE_GETAUXVAL)
check_type_size("long" SIZEOF_LONG)
check_type_size("void*" SIZEOF_POINTER)
check_c_source_compiles("#include <arm_neon.h>
int main(void) { float32x4_t v = vdupq_n_f32(1.0f); return (int)vgetq_lane_f32(v, 0) - 1; }" HAVE_NEON)
check_c_source_runs("#include <string.h>
#include <sys/utsname.h>
int main(void) { struct utsname u; uname(&u); return strncmp(u.machine, \"x86\", 3) == 0; }" RUNS_ON_TARGET)
check_cxx_compiler_flag(-mfpu=neon HAVE_MFPU_NEON)
configure_file(facts.h.in facts.h)
add_library(facts SHARED facts.c)
target_include_directories(facts PUBLIC ${CMAKE_CURRENT_BINARY_DIR})
add_executable(show-facts main.c)
target_link_libraries(show-facts facts)
install(TARGETS facts show-facts)
"""
FACTS_H = """\
#define FACTS_PROCESSOR "@CMAKE_SYSTEM_PROCESSOR@"
#define FACTS_SIZEOF_LONG @SIZEOF_LONG@
#cmakedefine01 HAVE_NEON
#cmakedefine01 RUNS_ON_TARGET
const char *facts_processor(void);
int facts_neon(void);
int facts_ran_on_target(void);
long facts_sizeof_long(void);
"""
FACTS_C = """\
#include "facts.h"
const char *facts_processor(void) { return FACTS_PROCESSOR; }
int facts_neon(void) { return HAVE_NEON; }
int facts_ran_on_target(void) { return RUNS_ON_TARGET; }
long facts_sizeof_long(void) { return FACTS_SIZEOF_LONG; }
"""
MAIN_C = """\
#include <stdio.h>
#include "facts.h"
int main(void) {
    printf("processor %s neon %d try_run-on-target %d long %ld\\n", facts_processor(), facts_neon(),
           facts_ran_on_target(), facts_sizeof_long());
    return 0;
}
"""
# target, uname -m, sizeof(long), NEON (Debian's armhf baseline, VFPv3-D16, has none)
ARCHES = {"armv7": ("debian-armv7", "armv7l", 4, 0), "aarch64": ("debian-aarch64", "aarch64", 8, 1)}


def facts_project(path: Path) -> Path:
    (path / "contexts" / "facts" / "src").mkdir(parents=True)
    (path / "contexts" / "facts" / "recipe.yaml").write_text(RECIPE)
    src = path / "contexts" / "facts" / "src"
    for name, text in {"CMakeLists.txt": CMAKELISTS, "facts.h.in": FACTS_H, "facts.c": FACTS_C,
                       "main.c": MAIN_C}.items():  # fmt: skip
        (src / name).write_text(text)
    (path / "dockerfiles").mkdir()
    (path / "dockerfiles" / "facts.Dockerfile.j2").write_text(TEMPLATE)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The project built for both arches with each driver: {mode: out directory}."""
    done = dockerarch("base", "bootstrap", "--arch", "armv7,aarch64", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr
    project = facts_project(tmp_path_factory.mktemp("facts"))
    outs = {}
    for mode in ("hybrid", "compilers"):
        out = project / f"dist-{mode}"
        done = dockerarch("build", "facts", "--arch", "armv7,aarch64", "--accel", mode,
                          "--out", str(out), cwd=project, timeout=3600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        outs[mode] = out
        (out / "stderr.txt").write_text(done.stderr)
    return outs


def unpacked(out: Path, target: str) -> dict[str, bytes]:
    (tarball,) = (out / target / "facts-1.0").glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        return {
            m.name.removeprefix("./"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def cache_entries(text: bytes) -> list[str]:
    return [
        line
        for line in text.decode().splitlines()
        if line.strip() and not line.startswith(("#", "//"))
    ]


def manifest(out: Path, target: str) -> dict[str, object]:
    return json.loads((out / target / "facts-1.0" / "manifest.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_native_and_emulated_drivers_configure_and_build_the_same(
    arch: str, built: dict[str, Path]
) -> None:
    target, machine, long_size, neon = ARCHES[arch]
    native, emulated = unpacked(built["hybrid"], target), unpacked(built["compilers"], target)
    assert sorted(native) == sorted(emulated)
    cache = cache_entries(native["usr/local/share/facts/CMakeCache.txt"])
    # Every cached check and setting is the same, the feature checks among them.
    assert cache == cache_entries(emulated["usr/local/share/facts/CMakeCache.txt"])
    entries = dict(line.split("=", 1) for line in cache)
    assert entries["HAVE_NEON:INTERNAL"] == ("1" if neon else "")
    assert entries["HAVE_ARM_NEON_H:INTERNAL"] == "1"
    assert entries["HAVE_IMMINTRIN_H:INTERNAL"] == "" and entries["RUNS_ON_TARGET:INTERNAL"] == "1"
    assert entries["SIZEOF_LONG:INTERNAL"] == str(long_size)
    assert entries["CMAKE_COMMAND:INTERNAL"] == "/usr/bin/cmake"
    assert entries["CMAKE_MAKE_PROGRAM:FILEPATH"] == "/usr/bin/ninja"
    # The detected processor is the target's (cmake asks the emulated `uname -m`), host too.
    system = native["usr/local/share/facts/CMakeSystem.cmake"]
    assert system == emulated["usr/local/share/facts/CMakeSystem.cmake"]
    assert f'set(CMAKE_SYSTEM_PROCESSOR "{machine}")'.encode() in system
    assert f'set(CMAKE_HOST_SYSTEM_PROCESSOR "{machine}")'.encode() in system
    assert b'set(CMAKE_CROSSCOMPILING "FALSE")' in system
    elves = [name for name, data in native.items() if data[:4] == b"\x7fELF"]
    assert sorted(elves) == ["usr/local/bin/show-facts", "usr/local/lib/libfacts.so"]
    for name in elves:
        assert elf_shape(native[name]) == elf_shape(emulated[name]), name
    # The smoke test ran the program on the target, under QEMU, with what cmake found.
    for out in built.values():
        assert manifest(out, target)["smoke"] == (
            f"processor {machine} neon {neon} try_run-on-target 1 long {long_size}"
        )


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_the_driver_ran_natively_only_when_asked_and_says_so(
    arch: str, built: dict[str, Path]
) -> None:
    target = ARCHES[arch][0]
    native, emulated = manifest(built["hybrid"], target), manifest(built["compilers"], target)
    assert native["accel"] == emulated["accel"] == "hybrid"
    # Every compiler run was native either way; who started them is what changed.
    for data in (native, emulated):
        hybrid = data["hybrid"]
        assert hybrid["emulated"] == 0 and hybrid["compiles"] >= 3  # type: ignore[index]
    assert native["hybrid"]["started_by_emulated"] == 0  # type: ignore[index]
    assert emulated["hybrid"]["started_by_native"] == 0  # type: ignore[index]
    # The emulated programs that started them are named: the shell ninja and make start each
    # compile with, and cmake (its compiler checks).
    assert native["emulated_starters"] == {}
    starters = emulated["emulated_starters"]
    assert sum(starters.values()) == emulated["hybrid"]["runs"]  # type: ignore[index,union-attr]
    assert "sh" in starters and set(starters) <= {"sh", "cmake", "ninja", "make"}  # type: ignore[operator]
    drivers = native["drivers"]
    assert sorted(drivers["native"]) == ["cmake", "dash", "make", "ninja-build"]  # type: ignore[index]
    assert drivers["emulated"] == {}  # type: ignore[index]
    assert emulated["drivers"] is None
    said = " ".join((built["hybrid"] / "stderr.txt").read_text().split())
    assert f"{target} " in said and "native build driver: dash " in said and "cmake 3." in said
    said_emulated = " ".join((built["compilers"] / "stderr.txt").read_text().split())
    assert "native build driver" not in said_emulated
    runs = emulated["hybrid"]["runs"]  # type: ignore[index]
    assert f"{runs} by an emulated one (sh {starters['sh']}" in said_emulated  # type: ignore[index]
