"""Whether and how a build goes hybrid: the toolchain it is given (the cross compilers, the native
drivers, ccache, uv), the ARM packages its build stage leaves out for them, the target whose
suite gives the cross compilers, and the toolchain files a build context carries.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dockerarch import paths
from dockerarch.accel.logs import (
    CCACHE_EXPORT,
    CCACHE_LOG,
    DRIVERS_EXPORT,
    DRIVERS_LOG,
    FARM_EXPORT,
    FARM_LOG,
    LOG,
    LOG_EXPORT,
)
from dockerarch.errors import ConfigError, UsageError
from dockerarch.recipes import Recipe
from dockerarch.targets import BoardTarget

MODES = ("hybrid", "compilers", "none")
# Debian packages whose x86-64 build drives a hybrid build in place of the ARM one, and the
# programs of each that are swapped (all of /usr/bin). dash and make are always in a hybrid
# build stage (dash is essential, make a replacement of build-essential); cmake and ninja only
# when the recipe installs them.
DRIVERS: dict[str, tuple[str, ...]] = {
    "dash": ("dash",),
    "make": ("make",),
    "cmake": ("cmake", "ctest", "cpack"),
    "ninja-build": ("ninja",),
}
# The PyPI distributions of the same drivers, which PEP 517 builds install into their build
# environment: their x86-64 wheels, retagged, are offered to uv there (data/toolchain/native-wheels).
DRIVER_WHEELS = {"cmake": "cmake", "ninja-build": "ninja"}
# Targets whose PEP 517 backends run in a native Python (data/toolchain/dockerarch_native_backend.py)
# of the same word size and byte order, so that sys.maxsize, pointer and C type sizes answer as
# the target's Python would: aarch64's in the x86-64 interpreter, 32-bit ARM's in the i386 one
# (the kernel runs both natively), by the target's Debian architecture.
BACKEND_ARCHES = ("aarch64", "armv7")
BACKEND_I386 = ("armhf",)  # Debian architectures whose backends run in the i386 interpreter
WHEELS_DIR = "/usr/lib/dockerarch/wheels"
DATA = paths.data_path("toolchain")
CONTEXT_DIR = "_dockerarch_toolchain"  # where the build context carries DATA
# uv (PyPI's x86-64 wheel carries the binary) is grafted beside the compilers: it resolves and
# installs a PEP 517 build's requirements natively for the emulated Python, where pip spends
# ~20 s of emulated start-up and resolution per build. Pinned, so a build's tools do not move.
UV_VERSION = "0.13.8"
# ARM packages a hybrid build stage must not install: the grafted toolchain takes their place
# (the ARM gcc would also own the same /usr/bin/<triplet>-gcc-N paths). What they brought that
# a build still needs: the C library's development files, make, and patch (build-essential's
# dpkg-dev depends on it; opencv-python's setup.py patches OpenEXR with it on 32-bit ARM, and
# without it failed for armv7 after 5 minutes: "patch -p0 < patches/patchOpenEXR", exit 127),
# and libatomic1 (gcc's libgcc-N-dev depends on it; ARM programs from PyPI load it, such as the
# armv7 cmake wheel scikit-build installs: "libatomic.so.1: cannot open shared object file").
_COMPILER_PACKAGES = re.compile(
    r"^(build-essential|gcc|g\+\+|cpp|gfortran|binutils|ccache|(gcc|g\+\+|cpp|gfortran)-\d+)$"
)
REPLACEMENTS = ("libc6-dev", "make", "patch", "libatomic1")
# A build compiles Fortran when its apt packages include gfortran (a recipe's, or the one a
# source tree's build system declares: recipes.declared_compilers).
_FORTRAN = re.compile(r"^gfortran(-\d+)?$")
# A recipe asks for a compiler when its apt packages include one of these.
_ASKS_FOR_COMPILER = re.compile(r"^(build-essential|gcc|g\+\+|(gcc|g\+\+)-\d+)$")


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """What the hybrid stage of one target's build installs and grafts."""

    triplet: str
    gcc: int
    debian_arch: str
    base_image: str  # the amd64 base the toolchain stage starts from
    base_target: str
    ccache: bool = True
    drivers: tuple[str, ...] = ()  # DRIVERS packages run natively ('hybrid'); none: 'compilers'
    python: str = ""  # the target's Python version (3.11): the native generators' interpreter
    native_python: tuple[str, ...] = ()  # the recipe's code generators run natively
    native_backend: bool = False  # PEP 517 backends run in the native Python (BACKEND_ARCHES)
    # Compile steps join the host's network: a farm server or the shared compiler cache of this
    # build listens on loopback.
    compile_network: str = ""
    fortran: bool = True  # Debian has the cross gfortran of this gcc: grafted beside gcc
    # The toolchain's amd64 suite has the target's Python version: its x86-64 (and for a 32-bit
    # target i386) interpreter is carried, for native generators and PEP 517 backends.
    image_python: bool = True

    @property
    def packages(self) -> tuple[str, ...]:
        """apt packages of the stage the toolchain's tree is collected in (gcc and libc6-dev: to
        build dockerarch-cc; distcc, a compile farm's client; every native driver and the YAML
        loader of native generators; uv and the drivers' wheels come from a stage of their own).
        The first three are the cross compiler. The same for every recipe of a target: one
        toolchain image per target (imagekeys.toolchain_key), each build using what it needs of
        it (``use_drivers``)."""
        return (*cross_packages(self.triplet, self.gcc, self.fortran), "ccache", "distcc", "gcc", "libc6-dev",
                *[d for d in DRIVERS if d != "dash"], "python3-yaml")  # fmt: skip

    @property
    def python32(self) -> bool:
        """The PEP 517 backends run in the i386 interpreter (a 32-bit target)."""
        return self.native_backend and self.debian_arch in BACKEND_I386

    @property
    def image_python32(self) -> bool:
        """The target's toolchain image carries the i386 interpreter (every 32-bit target's,
        whether this build's backends use it or not: one image per target)."""
        return self.image_python and self.debian_arch in BACKEND_I386

    @property
    def python_package(self) -> str:
        """The Debian package of the interpreter native generators run in (python3.11-minimal)."""
        return f"python{self.python}-minimal"

    @property
    def use_drivers(self) -> tuple[str, ...]:
        """The native drivers this build puts in place of the stage's own (use-native-drivers):
        its recipe's, and the native interpreter when its generators or backends run there."""
        python = bool(self.native_python) or self.native_backend
        return (*self.drivers, *([self.python_package] if python else []))

    def template_vars(self) -> dict[str, object]:
        return {
            "triplet": self.triplet,
            "gcc": self.gcc,
            "debian_arch": self.debian_arch,
            "base_image": self.base_image,
            "base_target": self.base_target,
            "packages": list(self.packages),
            "context": CONTEXT_DIR,
            "log": LOG,
            "log_export": LOG_EXPORT,
            "ccache": self.ccache,
            "uv_version": UV_VERSION,
            "drivers": list(self.drivers),
            "use_drivers": list(self.use_drivers),
            # what the target's one toolchain image carries, whatever this build uses of it
            "image_drivers": {d: DRIVERS[d] for d in DRIVERS},
            "image_driver_wheels": list(DRIVER_WHEELS.values()),
            "image_python": self.image_python,
            "image_python32": self.image_python32,
            "python_package": self.python_package,
            "python_program": f"python{self.python}",
            "native_python": list(self.native_python),
            "native_backend": self.native_backend,
            "python32": self.python32,
            "drivers_log": DRIVERS_LOG,
            "ccache_log": CCACHE_LOG,
            "ccache_export": CCACHE_EXPORT,
            "driver_wheels": [DRIVER_WHEELS[d] for d in self.drivers if d in DRIVER_WHEELS],
            "wheels_dir": WHEELS_DIR,
            "drivers_export": DRIVERS_EXPORT,
            "farm_log": FARM_LOG,
            "farm_export": FARM_EXPORT,
            "compile_network": self.compile_network,
        }


def cross_packages(triplet: str, gcc: int, fortran: bool = True) -> tuple[str, ...]:
    """Debian's cross compilers for ``triplet`` (C and C++, and Fortran where Debian has it:
    scipy's closure needs it): what a hybrid build grafts, and what a farm server installs to
    compile for it (the toolchain's digest covers all of them)."""
    return (f"gcc-{gcc}-{triplet}", f"g++-{gcc}-{triplet}",
            *([fortran_package(triplet, gcc)] if fortran else []), f"binutils-{triplet}")  # fmt: skip


def native_packages(gcc: int) -> tuple[str, ...]:
    """Debian's native C and C++ compilers of an amd64 target (what its own build stage runs):
    what a farm server installs to take a native build's compiles."""
    return (f"gcc-{gcc}", f"g++-{gcc}")


def fortran_package(triplet: str, gcc: int) -> str:
    return f"gfortran-{gcc}-{triplet}"


@dataclass(frozen=True, kw_only=True)
class Decision:
    """How one target builds: accel is 'hybrid', 'qemu' (plain emulation) or 'native'."""

    accel: str
    toolchain: Toolchain | None = None
    note: str = ""  # said once when hybrid was asked for but cannot apply


def build_stage_apt(packages: Iterable[str]) -> list[str]:
    """A build stage's apt packages in hybrid mode: no ARM compiler, its useful parts kept."""
    kept = [p for p in packages if not _COMPILER_PACKAGES.match(p)]
    return kept + [p for p in REPLACEMENTS if p not in kept]


def decide(
    target: BoardTarget,
    recipe: Recipe,
    *,
    requested: str,
    route_accel: str,
    toolchain_base: BoardTarget,
    cross_available: Callable[[str, str], bool],
    ccache: bool = True,
) -> Decision:
    """Hybrid, plain QEMU or native for one target; ``cross_available(package, suite)``.
    A target of the toolchain's own arch (amd64) has nothing to graft.
    Hybrid applies to recipes whose apt packages bring a compiler (build-essential, gcc, g++);
    ``requested`` 'compilers' is hybrid with the build driver left emulated."""
    if route_accel == "native":
        return Decision(accel="native")
    if target.arch == toolchain_base.arch:  # no cross compiler to graft (a foreign host's QEMU)
        return Decision(accel="qemu")
    if requested == "none":
        return Decision(accel="qemu")
    if recipe.no_hybrid:
        return Decision(
            accel="qemu",
            note=f"recipe '{recipe.name}' compiles with the emulated ARM compiler "
            f"({recipe.no_hybrid}): building under plain QEMU",
        )
    if not any(_ASKS_FOR_COMPILER.match(p) for p in recipe.apt):
        return Decision(accel="qemu")  # the recipe asks for no compiler: nothing to graft
    # Native generators and backends need the target's Python version in the toolchain's suite
    # (pynq-z1's Ubuntu 3.10 beside bookworm's 3.11 has none: they stay emulated).
    same_python = toolchain_base.python == target.python
    native = requested == "hybrid" and same_python
    toolchain = Toolchain(
        triplet=target.triplet, gcc=target.gcc, debian_arch=target.debian_arch,
        base_image=toolchain_base.base_image, base_target=toolchain_base.name, ccache=ccache,
        drivers=native_drivers(recipe) if requested == "hybrid" else (),
        python=target.python, image_python=same_python,
        native_python=recipe.native_python if native else (),
        native_backend=native and target.arch.name in BACKEND_ARCHES
        # a 32-bit target's needs an interpreter of its own (an image stage): only where PEP 517
        # builds run, in the recipes that make wheels
        and (target.debian_arch not in BACKEND_I386 or "wheel" in recipe.artifacts),
    )  # fmt: skip
    cross = cross_packages(toolchain.triplet, toolchain.gcc, fortran=False)
    missing = [p for p in cross if not cross_available(p, toolchain_base.suite)]
    fortran = cross_available(
        fortran_package(toolchain.triplet, toolchain.gcc), toolchain_base.suite
    )
    toolchain = dataclasses.replace(toolchain, fortran=fortran)
    if not fortran and any(_FORTRAN.match(p) for p in recipe.apt):
        missing.append(fortran_package(toolchain.triplet, toolchain.gcc))  # its Fortran needs it
    if missing:
        return Decision(
            accel="qemu",
            note=f"no hybrid build for {target.name}: Debian {toolchain_base.suite} has no "
            f"{', '.join(missing)} (gcc {target.gcc} is the target's compiler): building under "
            "plain QEMU, several times slower",
        )
    return Decision(accel="hybrid", toolchain=toolchain)


def native_drivers(recipe: Recipe) -> tuple[str, ...]:
    """The DRIVERS packages a hybrid build of ``recipe`` runs natively: the shell and make
    always, cmake and ninja when the recipe installs them."""
    return tuple(d for d in DRIVERS if d in ("dash", "make") or d in recipe.apt)


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise UsageError(
            f"--accel {mode} is not a mode dockerarch knows",
            fix=f"Use one of: {', '.join(MODES)} ('hybrid': native compilers and build driver; "
            "'compilers': native compilers only; 'none': everything emulated).",
        )
    return mode


def toolchain_base(target: BoardTarget, targets: Mapping[str, BoardTarget]) -> BoardTarget:
    """The amd64 target whose suite gives ``target`` its cross compilers (``toolchain:``)."""
    base = targets.get(target.toolchain)
    if base is None or base.arch.name != "amd64":
        what = "is not a target" if base is None else f"is an {base.arch.name} target"
        raise ConfigError(
            f"Target '{target.name}' ({target.source}) takes its hybrid toolchain from "
            f"'{target.toolchain}', which {what}.",
            fix="Name an amd64 target of the same suite in `toolchain:` (for example "
            "`newer-amd64: {extends: debian-amd64, suite: trixie, gcc: 14}`), or build with "
            "--accel none.",
        )
    return base


def prepare_context(context: Path) -> None:
    """Put the toolchain stage's files into a build context, with dockerarch's reader of index
    pages beside fetch-sdist (one reader for the host and the build)."""
    shutil.copytree(DATA, context / CONTEXT_DIR)
    shutil.copy2(
        Path(__file__).parent.parent / "simple_api.py", context / CONTEXT_DIR / "simple_api.py"
    )


# Code generators whose wheel for a target can be pure Python while their x86-64 wheel is
# compiled: a hybrid build runs them natively from their x86-64 compiled modules (a wheel set
# gives its members that x86-64 wheel). Must be data/toolchain/dockerarch_native_backend.py's
# SPEEDUPS (the build stage's side of it).
NATIVE_SPEEDUPS = ("cython",)
