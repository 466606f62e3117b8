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

import collections
import dataclasses
import functools
import hashlib
import re
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dockerarch import paths
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
DRIVERS_LOG = "/var/log/dockerarch-drivers.log"
# ccache's own record of each run of the build (stats_log): what came from the cache, so a build
# run again after an interruption shows what it did not compile again.
CCACHE_LOG = "/var/log/dockerarch-ccache.log"
CCACHE_EXPORT = ".dockerarch-ccache.log"
DRIVERS_EXPORT = ".dockerarch-drivers.log"
# Where each compile sent to a compile farm ran (dockerarch-distcc: "PLACE ok|failed
# [retried-after HOST,...]"), exported beside the artifacts.
FARM_LOG = "/var/log/dockerarch-farm.log"
FARM_EXPORT = ".dockerarch-farm.log"
DATA = paths.data_path("toolchain")
CONTEXT_DIR = "_dockerarch_toolchain"  # where the build context carries DATA
LOG = "/var/log/dockerarch-toolchain.log"
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

    @property
    def packages(self) -> tuple[str, ...]:
        """apt packages of the toolchain stage (gcc and libc6-dev: to build dockerarch-cc; pip to
        install uv; packaging for fetch-sdist; distcc, a compile farm's client; the native
        drivers). The first three are the cross compiler."""
        return (*cross_packages(self.triplet, self.gcc, self.fortran), "ccache", "distcc", "gcc", "libc6-dev",
                "python3-pip",
                "python3-packaging", *[d for d in self.drivers if d != "dash"],
                *(["python3-yaml"] if self.native_python else []))  # fmt: skip

    @property
    def python32(self) -> bool:
        """The PEP 517 backends run in the i386 interpreter (a 32-bit target)."""
        return self.native_backend and self.debian_arch in BACKEND_I386

    @property
    def python_package(self) -> str:
        """The Debian package of the interpreter native generators run in (python3.11-minimal)."""
        return f"python{self.python}-minimal"

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
            "driver_programs_of": {d: DRIVERS[d] for d in self.drivers},
            "python_package": self.python_package,
            "python_program": f"python{self.python}",
            "native_python": list(self.native_python),
            "native_backend": self.native_backend,
            "python32": self.python32,
            # The native interpreter: for the recipe's generators or for PEP 517 backends.
            "python_native": bool(self.native_python) or self.native_backend,
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
    toolchain = Toolchain(
        triplet=target.triplet, gcc=target.gcc, debian_arch=target.debian_arch,
        base_image=toolchain_base.base_image, base_target=toolchain_base.name, ccache=ccache,
        drivers=native_drivers(recipe) if requested == "hybrid" else (),
        python=target.python,
        native_python=recipe.native_python if requested == "hybrid" else (),
        native_backend=requested == "hybrid" and target.arch.name in BACKEND_ARCHES
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


def madison_has(output: str, suite: str) -> bool:
    """Whether `apt-cache madison` output lists a version from ``suite`` (or its updates)."""
    for line in output.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 3 and re.search(
            rf"\s{re.escape(suite)}(-updates|-security)?/", " " + fields[2]
        ):
            return True
    return False


def release_codenames(policy: str) -> dict[str, str]:
    """The suites `apt-cache policy` lists, each by its codename and by its archive name
    (`stable` -> `trixie`): {name: codename}."""
    names: dict[str, str] = {}
    for line in policy.splitlines():
        line = line.strip()
        if not line.startswith("release "):
            continue
        fields = dict(f.split("=", 1) for f in line[len("release ") :].split(",") if "=" in f)
        codename = fields.get("n")
        if codename:
            names[codename] = codename
            if fields.get("a"):
                names.setdefault(fields["a"], codename)
    return names


_HOST_APT: dict[tuple[str, str], bool] = {}  # (package, suite): the host's lists, once a run
_HOST_APT_LOCK = threading.Lock()
# What apt-cache reads: the package lists and the sources and pins. Their names, sizes and times
# key the answers kept on disk between runs (each apt-cache run reads the whole cache: 0.7 s).
HOST_APT_STATE = (Path("/var/lib/apt/lists"), Path("/etc/apt/sources.list"),
                  Path("/etc/apt/sources.list.d"), Path("/etc/apt/preferences"),
                  Path("/etc/apt/preferences.d"))  # fmt: skip
HOST_APT_MEMO = "host-apt.json"  # in base.STATE_DIR


def _host_apt_signature() -> str:
    digest = hashlib.sha256()
    for top in HOST_APT_STATE:
        try:
            entries = sorted(top.iterdir()) if top.is_dir() else [top]
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat()
            except OSError:
                continue
            if entry.is_file():
                digest.update(f"{entry}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _host_apt_memo_path() -> Path:
    from dockerarch import base

    return base.STATE_DIR / HOST_APT_MEMO


@functools.cache
def _host_apt_memo() -> dict[str, object]:
    """The answers of earlier runs, while the host's apt state is what they read; the file
    (re)started empty otherwise. Never an error: without it, apt-cache is asked again."""
    import json

    signature = _host_apt_signature()
    try:
        memo = json.loads(_host_apt_memo_path().read_text())
    except (OSError, ValueError):
        memo = None
    if not isinstance(memo, dict) or memo.get("signature") != signature:
        memo = {"signature": signature, "suites": None, "packages": {}}
    return memo


def _save_host_apt_memo() -> None:
    import json

    from dockerarch.files import write_atomic

    try:
        write_atomic(
            _host_apt_memo_path(), (json.dumps(_host_apt_memo(), indent=1) + "\n").encode()
        )
    except OSError:
        pass  # a state directory this user cannot write: the next run asks apt-cache again


def host_apt_has(package: str, suite: str) -> bool:
    """Whether the host's apt knows ``package`` in ``suite`` (a codename or an archive name such
    as `stable`): the toolchain stage's base is bootstrapped from the host's mirror, so the host's
    package lists tell what it can install. Without apt-cache, or when the host has no lists of
    that suite, assume yes: the toolchain stage's apt then says what is missing."""
    return host_apt_has_all([package], suite)[package]


def host_apt_has_all(packages: Iterable[str], suite: str) -> dict[str, bool]:
    """host_apt_has for several packages with one `apt-cache madison` (each apt-cache run reads
    the whole cache: about 0.7 s), remembered for the rest of the process."""
    from dockerarch import process

    wanted = list(dict.fromkeys(packages))
    with _HOST_APT_LOCK:
        known = _host_apt_memo()["packages"]
        assert isinstance(known, dict)
        for p in wanted:
            if f"{suite}/{p}" in known:
                _HOST_APT.setdefault((p, suite), bool(known[f"{suite}/{p}"]))
        asked = [p for p in wanted if (p, suite) not in _HOST_APT]
        if asked:
            if shutil.which("apt-cache") is None:
                found = dict.fromkeys(asked, True)
            else:
                suites = _host_suites()
                if suite not in suites:
                    found = dict.fromkeys(asked, True)
                else:
                    output = process.run(["apt-cache", "madison", *asked], check=False, timeout=60)
                    by_package = madison_by_package(output.stdout)
                    found = {p: madison_has(by_package.get(p, ""), suites[suite]) for p in asked}
            _HOST_APT.update({(p, suite): v for p, v in found.items()})
            known.update({f"{suite}/{p}": v for p, v in found.items()})
            _save_host_apt_memo()
        return {p: _HOST_APT[p, suite] for p in wanted}


@functools.cache
def _host_suites() -> dict[str, str]:
    from dockerarch import process

    memo = _host_apt_memo()
    if not isinstance(memo.get("suites"), dict):
        policy = process.run(["apt-cache", "policy"], check=False, timeout=60).stdout
        memo["suites"] = release_codenames(policy)
        _save_host_apt_memo()
    suites = memo["suites"]
    assert isinstance(suites, dict)
    return {str(k): str(v) for k, v in suites.items()}


def madison_by_package(output: str) -> dict[str, str]:
    """`apt-cache madison P1 P2 ...` output split into each package's lines."""
    lines: dict[str, list[str]] = {}
    for line in output.splitlines():
        name = line.split("|", 1)[0].strip()
        if "|" in line and name:
            lines.setdefault(name, []).append(line)
    return {name: "\n".join(found) for name, found in lines.items()}


def prepare_context(context: Path) -> None:
    """Put the toolchain stage's files into a build context, with dockerarch's reader of index
    pages beside fetch-sdist (one reader for the host and the build)."""
    shutil.copytree(DATA, context / CONTEXT_DIR)
    shutil.copy2(Path(__file__).with_name("simple_api.py"), context / CONTEXT_DIR / "simple_api.py")


# The stages a hybrid build takes from this machine's toolchain image (buildsteps.toolchain_image)
# in place of building them: the x86-64 Python of the emulated stages' installs, and the cross
# toolchain. The layout's stages `native-python` and `toolchain` are FROM the image named by
# these build arguments, or by default the stages built in the same Dockerfile.
NATIVE_STAGES = ("native-python-stage", "toolchain-stage")
NATIVE_STAGE_ARGS = ("DOCKERARCH_NATIVE_PYTHON", "DOCKERARCH_TOOLCHAIN")


# The files of the toolchain's context NATIVE_STAGES read (collect-toolchain copies and compiles
# these into the image; native-wheels runs there). The context's other scripts (apt-install,
# pip-install, the libraries check, ...) are bound by the build's own stages each time: editing
# one of them makes no new toolchain image.
TOOLCHAIN_FILES = ("collect-toolchain", "toolchain-id", "dockerarch-cc.c", "use-native-drivers",
                   "dockerarch_native_python.py", "dockerarch_native_backend.py",
                   "native-wheels", "collect-python32")  # fmt: skip
# A stage NATIVE_STAGES are made from too, when the Dockerfile has it (32-bit targets).
NATIVE_PYTHON32_STAGE = "native-python32-stage"


def toolchain_key(dockerfile: str, context: Path, base_id: str) -> str:
    """The sha256 of everything NATIVE_STAGES are made from: their text in the rendered
    Dockerfile (the apt packages, uv's version, the drivers, the collect step), the files of
    the toolchain's context they read (TOOLCHAIN_FILES), and the amd64 base's image id. Two
    builds with the same key get the same stages, so one image serves every recipe and target
    that shares them."""
    digest = hashlib.sha256(f"base {base_id}\n".encode())
    for name in NATIVE_STAGES:
        digest.update(f"stage {name}\n{stage_text(dockerfile, name)}\n".encode())
    if f" AS {NATIVE_PYTHON32_STAGE}\n" in dockerfile:
        text = stage_text(dockerfile, NATIVE_PYTHON32_STAGE)
        digest.update(f"stage {NATIVE_PYTHON32_STAGE}\n{text}\n".encode())
    _hash_files(digest, context / CONTEXT_DIR, TOOLCHAIN_FILES)
    return digest.hexdigest()


def _hash_files(digest: hashlib._Hash, root: Path, names: Iterable[str]) -> None:
    """Each of the files ``names`` under ``root`` that is there: name, executable bits, bytes."""
    for path in sorted(p for p in (root / n for n in names) if p.is_file()):
        digest.update(
            f"file {path.relative_to(root).as_posix()} {path.stat().st_mode & 0o111:o}\n".encode()
        )
        digest.update(hashlib.sha256(path.read_bytes()).digest())


# The stage every build's runtime-base is made from (the target's base plus its runtime
# packages) and the build argument that names the machine's image of it in its place
# (buildsteps.runtime_base_image).
RUNTIME_BASE_STAGE = "runtime-base-stage"
RUNTIME_BASE_ARG = "DOCKERARCH_RUNTIME_BASE"
# The stages RUNTIME_BASE_STAGE reads in a hybrid build: the base it is FROM, the package lists
# the native apt installs from, and the stage of the x86-64 Python it byte-compiles with (the
# build takes that Python from the toolchain image, whose other stages it does not read).
RUNTIME_BASE_READS = ("target-base", "package-lists", "native-python-stage")
# The toolchain scripts those stages run: the lists' fetch, the native apt and its native
# byte-compiling (a change to any other script makes no new runtime base).
RUNTIME_BASE_FILES = ("update-lists", "apt-install", "with-native-python", "native-python")


def runtime_base_key(
    dockerfile: str, context: Path, base_id: str, native_base_id: str | None
) -> str:
    """The sha256 of everything RUNTIME_BASE_STAGE is made from: its lines (the packages), the
    lines of the stages it reads, the toolchain scripts they run (RUNTIME_BASE_FILES), and the
    image ids of the target base and of the amd64 base under the native Python. The same key
    is the same image: every recipe whose artifacts need the same packages on the same base
    shares it."""
    own = stage_text(dockerfile, RUNTIME_BASE_STAGE)
    digest = hashlib.sha256(f"base {base_id}\nstage {RUNTIME_BASE_STAGE}\n{own}\n".encode())
    for name in RUNTIME_BASE_READS:
        if f" AS {name}\n" in dockerfile:
            digest.update(f"stage {name}\n{stage_text(dockerfile, name)}\n".encode())
    if native_base_id is not None:  # only its Python is used: not the toolchain's other stages
        digest.update(f"native base {native_base_id}\n".encode())
    if "--mount=type=bind,source=" in own:  # a hybrid build's apt step: the scripts it runs
        _hash_files(digest, context / CONTEXT_DIR, RUNTIME_BASE_FILES)
    return digest.hexdigest()


def stage_text(dockerfile: str, name: str) -> str:
    """The lines of stage ``name`` (its FROM line up to the next stage's), comments left out."""
    lines: list[str] = []
    inside = False
    for line in dockerfile.splitlines():
        if line.startswith("FROM "):
            inside = line.split()[-1] == name and line.split()[-2].upper() == "AS"
        if inside and not line.startswith("#"):
            lines.append(line)
    if not lines:
        raise ValueError(f"the Dockerfile has no stage {name}")
    return "\n".join(lines)


# Code generators whose wheel for a target can be pure Python while their x86-64 wheel is
# compiled: a hybrid build runs them natively from their x86-64 compiled modules (a wheel set
# gives its members that x86-64 wheel). Must be data/toolchain/dockerarch_native_backend.py's
# SPEEDUPS (the build stage's side of it).
NATIVE_SPEEDUPS = ("cython",)
LOG_STAGE = "toolchain-log"  # a hybrid build's export: the artifacts and, beside them, LOG_EXPORT
LOG_EXPORT = ".dockerarch-toolchain.log"


def count_runs(toolchain_log: str) -> dict[str, int]:
    """Counts of dockerarch-cc's log: one line per compiler run, 'MACHINE NAME compile|other
    PARENT', PARENT the program that started it (QEMU's interpreter when that was emulated,
    followed by the emulated program: 'arm-binfmt-P:cmake')."""
    runs = compiles = native = 0
    for line in toolchain_log.splitlines():
        fields = line.split()
        if len(fields) != 4:
            continue
        runs += 1
        compiles += fields[2] == "compile"
        native += fields[0] == "x86_64"
    started_emulated = sum(emulated_starters(toolchain_log).values())
    return {
        "runs": runs, "compiles": compiles, "native": native, "emulated": runs - native,
        "started_by_native": runs - started_emulated, "started_by_emulated": started_emulated,
    }  # fmt: skip


def emulated_starters(toolchain_log: str) -> dict[str, int]:
    """The emulated programs that started compiler runs, with how many each started, most
    first: what of a hybrid build's driver still runs under QEMU ('?' where the log does not
    name the program)."""
    starters: collections.Counter[str] = collections.Counter()
    for line in toolchain_log.splitlines():
        fields = line.split()
        if len(fields) == 4 and emulated_starter(fields[3]):
            starters[fields[3].partition(":")[2] or "?"] += 1
    return dict(starters.most_common())


def count_ccache(stats_log: str) -> dict[str, int]:
    """ccache's stats_log: a block per run ("# FILE", then its counters): hits (direct or
    preprocessed; ``remote_hits`` of them from the shared compiler cache), misses (compiled),
    runs ccache could not cache (links, probes); with a shared cache, the objects sent to it
    (``sent``), the runs it failed (``remote_errors``: down, refused, timed out) and the compiles
    that did without it after that (``remote_skipped``: dockerarch-cc's own blocks)."""
    counts = dict.fromkeys(
        ("hits", "misses", "uncached", "remote_hits", "sent", "remote_errors", "remote_skipped"), 0
    )
    blocks = [b for b in ("\n" + stats_log).split("\n# ") if b.strip()]
    for block in blocks:
        lines = block.split("\n")[1:]
        counters = set(lines)
        if counters - {""} == {"remote_storage_skipped"}:  # not a run of ccache's
            counts["remote_skipped"] += 1
            continue
        if counters & {"direct_cache_hit", "preprocessed_cache_hit"}:
            counts["hits"] += 1
            counts["remote_hits"] += "remote_storage_hit" in counters
        elif "cache_miss" in counters:
            counts["misses"] += 1
        else:
            counts["uncached"] += 1
        counts["sent"] += lines.count("remote_storage_write")
        counts["remote_errors"] += bool(
            counters & {"remote_storage_error", "remote_storage_timeout"}
        )
    return counts


def emulated_starter(program: str) -> bool:
    """Whether a parent program's basename is QEMU's (the binfmt interpreter of an emulated
    process: qemu-arm-static, arm-binfmt-P)."""
    return "qemu" in program or "binfmt" in program


@dataclass(frozen=True)
class DriverReport:
    """What use-native-drivers did: packages run natively (with versions), and those left
    emulated with the reason; how often each code generator ran natively; and where each PEP 517
    backend ran (dockerarch_native_backend: hook calls run natively, by backend, and the backends
    sent back to the emulated Python, with the reason), with uv's interpreter queries answered
    natively and the compiled build requirements given x86-64 twins (by version)."""

    native: dict[str, str]
    emulated: dict[str, str]
    generators: dict[str, int] = dataclasses.field(default_factory=dict)  # runs per generator
    backends: dict[str, int] = dataclasses.field(default_factory=dict)  # native hook calls
    emulated_backends: dict[str, str] = dataclasses.field(default_factory=dict)
    queries: dict[str, int] = dataclasses.field(default_factory=dict)  # uv's, answered natively
    twins: dict[str, str] = dataclasses.field(default_factory=dict)  # build requirement: version
    twins32: dict[str, str] = dataclasses.field(default_factory=dict)  # i686 ones (i386 backend)
    # pure-Python build requirements whose compiled x86-64 modules were not found: why
    pure: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> DriverReport:
        native: dict[str, str] = {}
        emulated: dict[str, str] = {}
        runs: dict[str, int] = {}
        backends: dict[str, int] = {}
        emulated_backends: dict[str, str] = {}
        queries: dict[str, int] = {}
        twins: dict[str, str] = {}
        twins32: dict[str, str] = {}
        pure: dict[str, str] = {}
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            package, _, detail = rest.partition(" ")
            if kind == "native" and package:
                native[package] = detail.split()[0] if detail else ""
            elif kind == "native-wheel" and package:  # once per Python start: said once
                native[f"{package} (PyPI wheel)"] = detail.strip()
            elif kind == "native-python" and package:  # one line per generator run
                runs[package] = runs.get(package, 0) + 1
            elif kind == "native-backend" and package:  # one line per hook call
                backends[package] = backends.get(package, 0) + 1
            elif kind == "native-query" and package:  # one line per uv interpreter query
                queries[package] = queries.get(package, 0) + 1
            elif kind == "emulated-backend" and package:
                emulated_backends[package] = detail
            elif kind == "native-twin" and package:  # once per build environment and machine
                version, _, machine = detail.strip().partition(" ")
                (twins32 if machine == "i686" else twins)[package] = version
            elif kind == "pure-python" and package:  # a speed-up not found
                version, _, why = detail.partition(" ")
                pure[f"{package} {version}"] = why
            elif kind == "emulated-python" and package:  # a generator sent back
                emulated[f"code generator {package}"] = detail
            elif kind == "emulated" and package:
                emulated[package] = detail
        return cls(native=native, emulated=emulated, generators=runs, backends=backends,
                   emulated_backends=emulated_backends, queries=queries, twins=twins,
                   twins32=twins32, pure=pure)  # fmt: skip

    def as_dict(self) -> dict[str, dict[str, str] | dict[str, int]]:
        return {"native": dict(self.native), "emulated": dict(self.emulated),
                "native_generators": dict(self.generators),
                "native_backends": dict(self.backends),
                "emulated_backends": dict(self.emulated_backends),
                "native_queries": dict(self.queries), "native_twins": dict(self.twins),
                "native_twins_i686": dict(self.twins32),
                "pure_python": dict(self.pure)}  # fmt: skip

    def lines(self) -> list[str]:
        """What the progress says."""
        said = []
        if self.native:
            said.append("native build driver: " + ", ".join(
                f"{p} {v}" for p, v in self.native.items()))  # fmt: skip
        said += [f"{p} stays emulated: {why}" for p, why in self.emulated.items()]
        if self.generators:
            said.append("native code generators: " + ", ".join(
                f"{g} ({n} run{'s' if n != 1 else ''})" for g, n in self.generators.items()))  # fmt: skip
        if self.backends:
            said.append("native PEP 517 backend: " + ", ".join(
                f"{b} ({n} hook call{'s' if n != 1 else ''})" for b, n in self.backends.items()))  # fmt: skip
        for machine, twins in (("x86-64", self.twins), ("i686", self.twins32)):
            if twins:
                said.append(f"{machine} compiled twins of build requirements: " + ", ".join(
                    f"{p} {v}" for p, v in twins.items()))  # fmt: skip
        said += [f"{p} runs natively from its pure-Python modules (slower): {why}"
                 for p, why in self.pure.items()]  # fmt: skip
        said += [f"PEP 517 backend {b} ran emulated: {why}"
                 for b, why in self.emulated_backends.items()]  # fmt: skip
        if self.queries:
            said.append("uv's interpreter query answered natively as the target: " + ", ".join(
                f"{p} ({n}x)" for p, n in self.queries.items()))  # fmt: skip
        return said
