"""dockerarch_native_backend: a hybrid build's PEP 517 backend runs in the native Python.

Imported by the emulated build stage's sitecustomize (use-native-drivers appends the import), so
by every start of the stage's Python, the native one included (both share the stage's standard
library). Inert unless $DOCKERARCH_NATIVE_BACKEND is 1 (dockerarch sets it for the targets of
accel.BACKEND_ARCHES).

In the emulated interpreter: when the command line is one of uv's PEP 517 hook calls (`python -c
SCRIPT` in the build environment uv made, SCRIPT importing the backend `as backend`), the same
command line is executed again in /usr/lib/dockerarch/bin/python-native, the x86-64 interpreter
of the same version (for a 32-bit target python-native32, the i386 one: collect-python32), as the
same environment's python (argv[0]: its pyvenv.cfg, its packages).
What the target's interpreter answers goes along ($DOCKERARCH_BACKEND_TARGET, JSON): machine,
multiarch, extension suffixes, pointer size and byte order.

In the native interpreter started so: the answers the backend can ask for are the target's, in
this process only (the variable is removed, so children, compilers and probes alike, see the
machine as it is): os.uname()'s machine, the C library's version (os.confstr) (so platform.machine() and sysconfig.get_platform(),
the wheel's platform tag), sys.implementation._multiarch (so sysconfig and distutils read the
target's _sysconfigdata: EXT_SUFFIX, SOABI, CC, LDSHARED, flags, include dirs), and
importlib.machinery.EXTENSION_SUFFIXES. Refused, back to the emulated interpreter with the
reason in the log, when the target's pointer size or byte order is not the native one's. i386
and armhf agree on both, and on the sizes of C's types; they differ in the alignment of 8-byte
types inside structures (4 on i386, 8 on ARM's EABI), which only a backend laying out C
structures itself with ctypes or struct could see (cffi's and Cython's layouts come from the
target's compiler).

Compiled build requirements (cffi, numpy, Cython: the target's wheels, which the native
interpreter cannot load) get their x86-64 twins (i386 ones for the i386 interpreter: "x86-64"
below stands for either): the same version's x86-64 wheel, fetched where
the build takes its wheels, gives only its compiled files (extension modules, the libraries it
vendors), copied beside the target's in the build environment. The names never clash
(_cffi_backend.cpython-311-x86_64-linux-gnu.so beside ...-aarch64-linux-gnu.so, vendored
libraries' hashed names): each interpreter loads its own by its own suffix, and everything else
(pure Python, headers such as numpy's _numpyconfig.h, static libraries) stays the target's. A
module of the target the native interpreter would load by its suffix (abi3, untagged) is passed
over for the Python source beside it (Cython's Utils.py beside Utils.abi3.so). Refused when a
module is left with neither a twin nor its source (no x86-64 wheel of that version where the
build looks, an abi3 twin that cannot sit beside the target's): "native-twin DIST VERSION" is
logged per twin. A code generator installed from its pure-Python wheel for the target (Cython
3.0 on armv7, SPEEDUPS) gets the compiled modules of its x86-64 wheel where that wheel's Python
sources are byte for byte the installed ones (each module beside its own source): the native
interpreter runs it compiled, the emulated one still loads the .py.

uv's question to the target's interpreter before it makes the build environment (`python3.N -I
-B -c SCRIPT`, its get_interpreter_info: markers, platform, glibc, schemes, pointer size) is
answered the same way: the native interpreter started as /usr/bin/python3.N, the target's
answers in place (the C library's version too), no build environment to look at.

Every decision is one line of $DOCKERARCH_DRIVERS_LOG: "native-backend NAME",
"emulated-backend NAME WHY", "native-twin DIST VERSION" (with " i686" after it from the i386
interpreter), "pure-python DIST VERSION WHY" (a speed-up not taken) or "native-query
INTERPRETER".
"""

from __future__ import annotations

import os
import sys

NATIVE = "/usr/lib/dockerarch/bin/python-native"
NATIVE32 = "/usr/lib/dockerarch/bin/python-native32"  # i386: the backends of 32-bit targets
TARGET = "DOCKERARCH_BACKEND_TARGET"
EMULATED = "DOCKERARCH_BACKEND_EMULATED"  # set when the hook went back: never dispatched again
# The line of uv's script that imports the backend: `import NAME as backend`, or for an object
# path (setuptools.build_meta:__legacy__, the default of a pyproject.toml without build-backend)
# `from NAME import OBJECT as backend`.
_BACKEND = r"^(?:import ([\w.]+)|from ([\w.]+) import (\w+)) as backend$"
_QUERY = "from python.get_interpreter_info import main"  # uv's interpreter query script
# The native interpreters' multiarch names and ELF machines (x86-64: 62, i386: 3)
_NATIVE_MACHINES = {"x86_64-linux-gnu": 62, "i386-linux-gnu": 3}
_EM_NATIVE = _NATIVE_MACHINES.get(getattr(sys.implementation, "_multiarch", ""), 62)
_I386 = _EM_NATIVE == 3  # this is the i386 interpreter (a 32-bit target's backend)
_NATIVE_NAME = "i386" if _I386 else "x86-64"  # in what the log says


def hook_backend(argv: list[str], environ: dict[str, str], prefix: str,
                 base_prefix: str) -> str | None:  # fmt: skip
    """The backend uv's PEP 517 hook call ``argv`` imports, or None for any other command line.
    uv runs each hook as ``ENV/bin/python -c SCRIPT`` with VIRTUAL_ENV (the environment) and
    UV_INTERNAL__BUILD_DIR (the source tree) set."""
    if len(argv) != 3 or argv[1] != "-c" or "UV_INTERNAL__BUILD_DIR" not in environ:
        return None
    if prefix == base_prefix or environ.get("VIRTUAL_ENV") != prefix:
        return None
    import re  # only here: every Python start of the build stage loads this module

    found = re.search(_BACKEND, argv[2], re.MULTILINE)
    if found is None:
        return None
    return found.group(1) or f"{found.group(2)}:{found.group(3)}"


def interpreter_query(argv: list[str], prefix: str, base_prefix: str) -> bool:
    """Whether ``argv`` is uv's question to a base interpreter about itself (``python3.N -I -B
    -c SCRIPT``, SCRIPT running uv's get_interpreter_info)."""
    return (len(argv) == 5 and argv[1:4] == ["-I", "-B", "-c"] and prefix == base_prefix
            and _QUERY in argv[4])  # fmt: skip


def elf_machine(path: str) -> int | None:
    """The ELF machine of the file at ``path`` (62: x86-64), or None for any other file."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return int.from_bytes(head[18:20] if head[5] == 1 else head[19:17:-1], "little")


def _compiled(top: str) -> list[str]:
    """The files named *.so or *.so.N under ``top``, relative to it, in a stable order."""
    found = []
    for root, dirs, files in os.walk(top):
        dirs.sort()
        found += [os.path.relpath(os.path.join(root, name), top)
                  for name in sorted(files) if name.endswith(".so") or ".so." in name]  # fmt: skip
    return found


def _library(relpath: str) -> bool:
    """Whether a compiled file is a library a module loads (a wheel's vendored *.libs, lib*.so*),
    not a module Python imports by its name."""
    parts = relpath.split(os.sep)
    return any(p.endswith(".libs") for p in parts[:-1]) or parts[-1].startswith("lib")


def _stem(relpath: str) -> str:
    """A module file's path without its suffixes: pkg/mod.cpython-311-aarch64-linux-gnu.so -> pkg/mod."""
    head, name = os.path.split(relpath)
    return os.path.join(head, name.split(".", 1)[0])


def without_twins(top: str, native_suffix: str) -> list[str]:
    """The target's compiled modules under ``top`` (not x86-64 code, not a vendored library)
    that have no x86-64 twin: the same module named with ``native_suffix``, which the native
    interpreter finds first."""
    found = []
    for rel in _compiled(top):
        machine = elf_machine(os.path.join(top, rel))
        # a twin of either native interpreter is not the target's (armv7: i386 ones for the
        # backend, x86-64 ones for code generators, in the same environment)
        if machine is None or machine in _NATIVE_MACHINES.values() or _library(rel):
            continue
        if not os.path.exists(os.path.join(top, _stem(rel) + native_suffix)):
            found.append(rel)
    return found


def stranded(top: str, modules: list[str]) -> list[str]:
    """Of ``modules`` (the target's, without twins), those without their own Python source
    beside them (Cython's wheels ship Utils.py beside Utils.abi3.so: the module compiled from
    it), which the native interpreter would load instead (skip_foreign_modules)."""
    return [rel for rel in modules if not os.path.exists(os.path.join(top, _stem(rel) + ".py"))]


def owners(top: str, relpaths: list[str]) -> dict[tuple[str, str], list[str]]:
    """The distributions (name, version) in the environment ``top`` whose RECORD lists each of
    ``relpaths``; a file no RECORD lists is under ("", "")."""
    import csv

    owner: dict[str, tuple[str, str]] = {}
    for info in sorted(os.listdir(top) if os.path.isdir(top) else []):
        if not info.endswith(".dist-info"):
            continue
        name = version = ""
        try:
            with open(os.path.join(top, info, "METADATA"), encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        break
                    key, _, value = line.partition(":")
                    if key == "Name":
                        name = value.strip()
                    elif key == "Version":
                        version = value.strip()
            with open(os.path.join(top, info, "RECORD"), newline="", encoding="utf-8") as f:
                for row in csv.reader(f):
                    if row:
                        owner[os.path.normpath(row[0])] = (name, version)
        except OSError:
            continue
    found: dict[tuple[str, str], list[str]] = {}
    for rel in relpaths:
        found.setdefault(owner.get(os.path.normpath(rel), ("", "")), []).append(rel)
    return found


def twin_files(unpacked: str, top: str) -> list[str]:
    """The x86-64 files of a wheel unpacked at ``unpacked`` (its extension modules and the
    libraries it vendors) that ``top`` does not have, relative to both."""
    return [rel for rel in _compiled(unpacked)
            if elf_machine(os.path.join(unpacked, rel)) == _EM_NATIVE
            and not os.path.lexists(os.path.join(top, rel))]  # fmt: skip


def compiled_from_source(unpacked: str, top: str) -> tuple[list[str], str | None]:
    """For a distribution installed in ``top`` from its pure-Python wheel: the x86-64 wheel's
    (unpacked at ``unpacked``) extension modules compiled from a Python source that ``top`` has,
    byte for byte, beside their own source (Cython's Scanning.py beside Scanning.cpython-311-
    x86_64-linux-gnu.so), with the libraries they vendor; and why none may be taken, or None:
    a Python source both wheels ship that differs (not the same code)."""
    import filecmp

    for root, _, files in os.walk(unpacked):
        for name in files:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(root, name), unpacked)
            mine = os.path.join(top, rel)
            if os.path.isfile(mine) and not filecmp.cmp(mine, os.path.join(unpacked, rel), False):
                return [], f"its {_NATIVE_NAME} wheel's {rel} is not the one installed"
    taken = [rel for rel in twin_files(unpacked, top) if _library(rel) or (
        os.path.isfile(os.path.join(top, _stem(rel) + ".py"))
        and os.path.isfile(os.path.join(unpacked, _stem(rel) + ".py")))]  # fmt: skip
    return taken, None


def _fetch_twin(name: str, version: str, top: str, pure: bool = False) -> str | None:
    """Copies the compiled files of ``name`` ``version``'s x86-64 wheel into the environment
    ``top``; why not, or None. The wheel comes from where this build takes its wheels: uv's index
    settings, or $DOCKERARCH_TWIN_ARGS (a wheel set's build: its own wheels, no index). ``pure``:
    the target's is its pure-Python wheel, and only modules compiled from the same sources are
    taken (compiled_from_source)."""
    import shlex
    import shutil
    import subprocess
    import tempfile

    uv = shutil.which("uv")
    if uv is None:
        return "uv is not in this stage"
    unpacked = tempfile.mkdtemp(prefix="dockerarch-twin-")
    try:
        run = subprocess.run(
            [uv, "pip", "install", "--quiet", "--no-deps", "--only-binary", ":all:",
             *shlex.split(os.environ.get("DOCKERARCH_TWIN_ARGS", "")),
             "--python", NATIVE32 if _I386 else NATIVE, "--target", unpacked,
             f"{name}=={version}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if run.returncode != 0:
            said = [ln.strip() for ln in (run.stderr + run.stdout).splitlines() if ln.strip()]
            return (
                f"no {_NATIVE_NAME} wheel of {name} {version} "
                f"({said[-1] if said else run.returncode})"
            )
        taken, differs = compiled_from_source(unpacked, top) if pure else (
            twin_files(unpacked, top), None)  # fmt: skip
        if differs is not None:
            return differs
        if pure and not taken:
            return f"its {_NATIVE_NAME} wheel has no compiled modules beside their sources"
        for rel in taken:  # each whole or not at all: another may import it
            dest = os.path.join(top, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(os.path.join(unpacked, rel), dest + ".dockerarch-part")
            os.replace(dest + ".dockerarch-part", dest)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)  # made here: nothing mounted under it
    _log(f"native-twin {name} {version}" + (" i686" if _I386 else ""))
    return None


# Build requirements that run in the native interpreter (code generators) and whose wheel for a
# target can be pure Python while their x86-64 wheel is compiled (Cython 3.0: no armv7 wheel, so
# pandas' and scipy's armv7 builds install py2.py3-none-any, and Cython runs 2-3x slower pure).
SPEEDUPS = ("cython",)
# in such a distribution's .dist-info: its compiled twins were sought (by each native interpreter)
_MARK = "DOCKERARCH-TWIN-i386" if _I386 else "DOCKERARCH-TWIN"


def pure_speedups(top: str) -> list[tuple[str, str, str]]:
    """The SPEEDUPS installed in ``top`` from their pure-Python wheels (no compiled file in their
    RECORD) whose twins were not sought yet: (name, version, .dist-info directory)."""
    import csv

    found = []
    for info in sorted(os.listdir(top) if os.path.isdir(top) else []):
        name, _, version = info.removesuffix(".dist-info").partition("-")
        if not info.endswith(".dist-info") or name.lower().replace("_", "-") not in SPEEDUPS:
            continue
        path = os.path.join(top, info)
        if os.path.exists(os.path.join(path, _MARK)):
            continue
        try:
            with open(os.path.join(path, "RECORD"), newline="", encoding="utf-8") as f:
                rows = [row[0] for row in csv.reader(f) if row]
        except OSError:
            continue
        if not any(r.endswith(".so") or ".so." in r for r in rows):
            found.append((name, version, path))
    return found


def twins(site_dirs: list[str]) -> str | None:
    """Gives the target's compiled modules in the build environment their x86-64 twins, and the
    SPEEDUPS installed pure for the target their x86-64 compiled modules; why the native
    interpreter cannot stand in, or None: a module left with neither a twin nor its Python
    source (the failed fetch said, when one failed). A speed-up not found is said
    ("pure-python DIST VERSION WHY"), not a refusal: the pure modules run natively all the same."""
    import _imp

    native_suffix = _imp.extension_suffixes()[0]
    why = None
    for top in site_dirs:
        fetched = None
        for (name, version), files in owners(top, without_twins(top, native_suffix)).items():
            if not name:
                fetched = (
                    fetched
                    or f"a compiled module for the target belongs to no distribution ({files[0]})"
                )
            else:
                fetched = fetched or _fetch_twin(name, version, top)
        for name, version, info in pure_speedups(top):
            slower = _fetch_twin(name, version, top, pure=True)
            if slower is not None:
                _log(f"pure-python {name} {version} {slower}")
            with open(os.path.join(info, _MARK), "w") as mark:  # sought once per environment
                mark.write((slower or "twins copied") + "\n")
        left = stranded(top, without_twins(top, native_suffix))
        if left and why is None:
            why = fetched or (f"the build environment has a compiled module for the target "
                              f"without an {_NATIVE_NAME} twin ({left[0]})")  # fmt: skip
    if site_dirs:
        import importlib

        importlib.invalidate_caches()
    return why


def skip_foreign_modules() -> None:
    """In a native interpreter: an extension module file that is not x86-64 code (the target's
    abi3 or untagged module, whose suffix the native interpreter also takes) is passed over for
    the Python source beside it, as if it were not there, instead of failing to load."""
    import _imp
    import importlib.machinery as m
    import types

    class Finder(m.FileFinder):
        def find_spec(self, fullname: str,
                      target: types.ModuleType | None = None) -> m.ModuleSpec | None:  # fmt: skip
            spec = super().find_spec(fullname, target)
            origin = getattr(spec, "origin", None)
            if (spec is not None and isinstance(spec.loader, m.ExtensionFileLoader) and origin
                    and elf_machine(origin) not in (None, _EM_NATIVE)):  # fmt: skip
                source = m.FileFinder(self.path, (m.SourceFileLoader, m.SOURCE_SUFFIXES),
                                      (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES))  # fmt: skip
                return source.find_spec(fullname, target)
            return spec

    details = ((m.ExtensionFileLoader, _imp.extension_suffixes()),
               (m.SourceFileLoader, m.SOURCE_SUFFIXES),
               (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES))  # fmt: skip
    hooks = [h for h in sys.path_hooks if getattr(h, "__name__", "") != "path_hook_for_FileFinder"]
    sys.path_hooks[:] = [*hooks, Finder.path_hook(*details)]
    sys.path_importer_cache.clear()


def refusal(target: dict[str, object]) -> str | None:
    """Why the native interpreter may not stand in for ``target`` at all, or None."""
    if target.get("maxsize") != sys.maxsize or target.get("byteorder") != sys.byteorder:
        bits = 64 if sys.maxsize > 2**32 else 32
        return (
            f"the target's Python is not {bits}-bit {sys.byteorder}-endian as the "
            f"{_NATIVE_NAME} one is"
        )
    return None


def answer_machine(machine: str) -> None:
    """os.uname().machine (so platform.machine(), asked again) is ``machine``, in this process."""
    native_uname = os.uname

    def uname() -> os.uname_result:
        u = native_uname()
        return os.uname_result((u.sysname, u.nodename, u.release, u.version, machine))

    os.uname = uname
    platform = sys.modules.get("platform")
    if platform is not None and hasattr(platform, "_uname_cache"):
        platform._uname_cache = None  # type: ignore[attr-defined]


def _log(line: str) -> None:
    log = os.environ.get("DOCKERARCH_DRIVERS_LOG")
    if log and os.access(os.path.dirname(log), os.W_OK):
        with open(log, "a") as f:
            f.write(line + "\n")


def _dispatch() -> None:
    """In the emulated interpreter: hand uv's hook calls and interpreter query to the native one."""
    if os.environ.get("DOCKERARCH_NATIVE_BACKEND") != "1" or EMULATED in os.environ:
        return
    argv = sys.orig_argv
    backend: str | None = None
    if interpreter_query(argv, sys.prefix, sys.base_prefix):
        kind, backend = "query", os.path.basename(sys.executable)
    elif len(argv) == 3 and argv[1] == "-c":  # most starts are known without the environment
        kind = "backend"
        backend = hook_backend(argv, dict(os.environ), sys.prefix, sys.base_prefix)
    if backend is None:
        return
    native = NATIVE32 if sys.maxsize < 2**32 else NATIVE  # a 32-bit target's: the i386 one
    if not os.access(native, os.X_OK):
        if kind == "backend":
            _log(f"emulated-backend {backend} the native interpreter is not in this stage")
        return
    import importlib.machinery
    import json

    os.environ[TARGET] = json.dumps({
        "kind": kind, "backend": backend, "machine": os.uname().machine,
        "libc": os.confstr("CS_GNU_LIBC_VERSION"),
        "multiarch": getattr(sys.implementation, "_multiarch", ""),
        "suffixes": list(importlib.machinery.EXTENSION_SUFFIXES), "maxsize": sys.maxsize,
        "byteorder": sys.byteorder, "emulated": os.path.realpath(sys.executable),
    })  # fmt: skip
    os.execv(native, [sys.executable, *argv[1:]])


def _as_target() -> None:
    """In the native interpreter started by _dispatch: answer as the target, or go back."""
    raw = os.environ.pop(TARGET, None)
    if raw is None:
        return
    import json
    import site

    target = json.loads(raw)

    query = target["kind"] == "query"  # no build environment: only the interpreter's own sizes
    why = refusal(target)
    if why is None and not query:
        why = twins(site.getsitepackages())
    if why is not None:
        if not query:
            _log(f"emulated-backend {target['backend']} {why}")
        os.environ[EMULATED] = "1"
        os.execv(target["emulated"], [sys.executable, *sys.orig_argv[1:]])
    if not query:
        skip_foreign_modules()
    import importlib.machinery

    answer_machine(str(target["machine"]))
    native_confstr = os.confstr
    libc = target.get("libc")

    def confstr(name: str | int) -> str | None:
        if libc and name in ("CS_GNU_LIBC_VERSION", os.confstr_names.get("CS_GNU_LIBC_VERSION")):
            return str(libc)
        return native_confstr(name)

    os.confstr = confstr
    sys.implementation._multiarch = target["multiarch"]  # type: ignore[attr-defined]
    importlib.machinery.EXTENSION_SUFFIXES[:] = target["suffixes"]
    # Asked before this (3.12+ also keeps a flag): asked again.
    sysconfig = sys.modules.get("sysconfig")
    for attr, value in (("_CONFIG_VARS", None), ("_CONFIG_VARS_INITIALIZED", False)):
        if sysconfig is not None and hasattr(sysconfig, attr):
            setattr(sysconfig, attr, value)
    _log(f"native-{target['kind']} {target['backend']}")


if getattr(sys.implementation, "_multiarch", "") in _NATIVE_MACHINES:
    _as_target()
else:
    _dispatch()
