"""Hybrid builds: the emulated ARM userland compiles with native x86-64 cross compilers.

Under plain QEMU every compiler process is emulated, 8-10x slower than native. A hybrid build
adds an amd64 stage that installs Debian's cross gcc, g++ and binutils for the target's triplet
(gcc major = the target's, so libstdc++ symbol versions match the board) and ccache, collects
them with the x86-64 libraries they load (data/toolchain/collect-toolchain) and copies that tree
into the emulated build stage. The kernel runs x86-64 programs natively inside the ARM container.
Debian's Python records CC=<triplet>-gcc in its sysconfig, and CC/CXX point there too, so
setuptools, meson, cmake and make all find it.

The build *driver* runs natively too (mode 'hybrid'; 'compilers' keeps it emulated): the x86-64
build of the very Debian packages the build stage installed -- cmake (with ctest and cpack),
ninja, make and the shell, dash, that starts each compile -- takes the place of the ARM programs,
at the same paths, when both are the same version (data/toolchain/use-native-drivers; a
different version stays emulated, and the progress says so). What must observe the target stays
emulated: `uname` (cmake asks the program `uname -m` for CMAKE_SYSTEM_PROCESSOR, so it still
says armv7l or aarch64), the target's Python (sysconfig, code generators, meson), and every
program built for the target (try_run, tests). Nothing is preloaded, so nothing leaks into
emulated children.

What runs there is dockerarch-cc (data/toolchain/dockerarch-cc.c): an x86-64 driver that logs
every invocation with the machine it ran on, then execs ccache and the cross compiler. Its report
at the end of the build stage ("N compiler runs, N native x86_64, 0 emulated") and its log, read
through the small `toolchain-log` stage, are the proof that the compiles did not run under QEMU;
the manifest keeps the counts.

Nothing of this reaches the artifacts (FROM scratch, only /out) or the runtime image (the base).

"""

from __future__ import annotations

from dockerarch.accel.aptquery import (
    host_apt_has,
    host_apt_has_all,
    madison_by_package,
    madison_has,
    release_codenames,
)
from dockerarch.accel.decision import (
    BACKEND_ARCHES,
    BACKEND_I386,
    CONTEXT_DIR,
    DATA,
    DRIVER_WHEELS,
    DRIVERS,
    NATIVE_SPEEDUPS,
    UV_VERSION,
    Decision,
    Toolchain,
    build_stage_apt,
    check_mode,
    cross_packages,
    decide,
    native_drivers,
    native_packages,
    prepare_context,
    toolchain_base,
)
from dockerarch.accel.imagekeys import (
    NATIVE_PYTHON_ARG,
    NATIVE_PYTHON_STAGE,
    NATIVE_STAGES,
    RUNTIME_BASE_ARG,
    RUNTIME_BASE_STAGE,
    TOOLCHAIN_ARG,
    TOOLCHAIN_FILES,
    native_python_key,
    runtime_base_key,
    stage_text,
    toolchain_key,
)
from dockerarch.accel.logs import (
    CCACHE_EXPORT,
    CCACHE_LOG,
    DRIVERS_EXPORT,
    DRIVERS_LOG,
    FARM_EXPORT,
    FARM_LOG,
    LOG,
    LOG_EXPORT,
    LOG_STAGE,
    DriverReport,
    count_ccache,
    count_runs,
    emulated_starters,
)

__all__ = [
    "BACKEND_ARCHES",
    "BACKEND_I386",
    "CCACHE_EXPORT",
    "CCACHE_LOG",
    "CONTEXT_DIR",
    "DATA",
    "DRIVERS",
    "DRIVERS_EXPORT",
    "DRIVERS_LOG",
    "DRIVER_WHEELS",
    "FARM_EXPORT",
    "FARM_LOG",
    "LOG",
    "LOG_EXPORT",
    "LOG_STAGE",
    "NATIVE_PYTHON_ARG",
    "NATIVE_PYTHON_STAGE",
    "NATIVE_SPEEDUPS",
    "NATIVE_STAGES",
    "RUNTIME_BASE_ARG",
    "RUNTIME_BASE_STAGE",
    "TOOLCHAIN_ARG",
    "TOOLCHAIN_FILES",
    "UV_VERSION",
    "Decision",
    "DriverReport",
    "Toolchain",
    "build_stage_apt",
    "check_mode",
    "count_ccache",
    "count_runs",
    "cross_packages",
    "decide",
    "emulated_starters",
    "host_apt_has",
    "host_apt_has_all",
    "madison_by_package",
    "madison_has",
    "native_drivers",
    "native_packages",
    "native_python_key",
    "prepare_context",
    "release_codenames",
    "runtime_base_key",
    "stage_text",
    "toolchain_base",
    "toolchain_key",
]
