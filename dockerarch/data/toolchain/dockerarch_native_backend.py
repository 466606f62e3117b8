"""dockerarch_native_backend: a hybrid build's PEP 517 backend runs in the native Python.

Imported by the emulated build stage's sitecustomize (use-native-drivers appends the import), so
by every start of the stage's Python, the native one included (both share the stage's standard
library). Inert unless $DOCKERARCH_NATIVE_BACKEND is 1 (dockerarch sets it for 64-bit targets).

In the emulated interpreter: when the command line is one of uv's PEP 517 hook calls (`python -c
SCRIPT` in the build environment uv made, SCRIPT importing the backend `as backend`), the same
command line is executed again in /usr/lib/dockerarch/bin/python-native, the x86-64 interpreter
of the same version, as the same environment's python (argv[0]: its pyvenv.cfg, its packages).
What the target's interpreter answers goes along ($DOCKERARCH_BACKEND_TARGET, JSON): machine,
multiarch, extension suffixes, pointer size and byte order.

In the native interpreter started so: the answers the backend can ask for are the target's, in
this process only (the variable is removed, so children, compilers and probes alike, see the
machine as it is): os.uname()'s machine, the C library's version (os.confstr) (so platform.machine() and sysconfig.get_platform(),
the wheel's platform tag), sys.implementation._multiarch (so sysconfig and distutils read the
target's _sysconfigdata: EXT_SUFFIX, SOABI, CC, LDSHARED, flags, include dirs), and
importlib.machinery.EXTENSION_SUFFIXES. Refused, back to the emulated interpreter with the
reason in the log, when the target's pointer size or byte order is not the native one (32-bit
ARM: sys.maxsize would differ), or when the build environment holds a compiled module for the
target (numpy, cffi or Cython as build requirements: the native interpreter cannot load them).

uv's question to the target's interpreter before it makes the build environment (`python3.N -I
-B -c SCRIPT`, its get_interpreter_info: markers, platform, glibc, schemes, pointer size) is
answered the same way: the native interpreter started as /usr/bin/python3.N, the target's
answers in place (the C library's version too), no build environment to look at.

Every decision is one line of $DOCKERARCH_DRIVERS_LOG: "native-backend NAME",
"emulated-backend NAME WHY" or "native-query INTERPRETER".
"""

from __future__ import annotations

import os
import sys

NATIVE = "/usr/lib/dockerarch/bin/python-native"
TARGET = "DOCKERARCH_BACKEND_TARGET"
EMULATED = "DOCKERARCH_BACKEND_EMULATED"  # set when the hook went back: never dispatched again
_BACKEND = r"^import ([\w.]+) as backend$"  # the line of uv's script that imports it
_QUERY = "from python.get_interpreter_info import main"  # uv's interpreter query script
_EM_X86_64 = 62


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
    return found.group(1) if found else None


def interpreter_query(argv: list[str], prefix: str, base_prefix: str) -> bool:
    """Whether ``argv`` is uv's question to a base interpreter about itself (``python3.N -I -B
    -c SCRIPT``, SCRIPT running uv's get_interpreter_info)."""
    return (len(argv) == 5 and argv[1:4] == ["-I", "-B", "-c"] and prefix == base_prefix
            and _QUERY in argv[4])  # fmt: skip


def foreign_module(site_dirs: list[str]) -> str | None:
    """The first compiled module under ``site_dirs`` that is not x86-64 code (a file named
    *.so with an ELF header of another machine), as a path relative to its directory."""
    for top in site_dirs:
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if not (name.endswith(".so") or ".so." in name):
                    continue
                path = os.path.join(root, name)
                try:
                    with open(path, "rb") as f:
                        head = f.read(20)
                except OSError:
                    continue
                if len(head) == 20 and head[:4] == b"\x7fELF":
                    machine = head[18:20] if head[5] == 1 else head[19:17:-1]
                    if int.from_bytes(machine, "little") != _EM_X86_64:
                        return os.path.relpath(path, top)
    return None


def refusal(target: dict[str, object], site_dirs: list[str]) -> str | None:
    """Why the native interpreter may not run the backend for ``target``, or None."""
    if target.get("maxsize") != sys.maxsize or target.get("byteorder") != sys.byteorder:
        return "the target's Python is not 64-bit little-endian as the native one is"
    module = foreign_module(site_dirs)
    if module is not None:
        return f"the build environment has a compiled module for the target ({module})"
    return None


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
    if not os.access(NATIVE, os.X_OK):
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
    os.execv(NATIVE, [sys.executable, *argv[1:]])


def _as_target() -> None:
    """In the native interpreter started by _dispatch: answer as the target, or go back."""
    raw = os.environ.pop(TARGET, None)
    if raw is None:
        return
    import json
    import site

    target = json.loads(raw)

    query = target["kind"] == "query"  # no build environment: only the interpreter's own sizes
    why = refusal(target, [] if query else site.getsitepackages())
    if why is not None:
        if not query:
            _log(f"emulated-backend {target['backend']} {why}")
        os.environ[EMULATED] = "1"
        os.execv(target["emulated"], [sys.executable, *sys.orig_argv[1:]])
    import importlib.machinery

    native_uname = os.uname
    machine = str(target["machine"])

    def uname() -> os.uname_result:
        u = native_uname()
        return os.uname_result((u.sysname, u.nodename, u.release, u.version, machine))

    native_confstr = os.confstr
    libc = target.get("libc")

    def confstr(name: str | int) -> str | None:
        if libc and name in ("CS_GNU_LIBC_VERSION", os.confstr_names.get("CS_GNU_LIBC_VERSION")):
            return str(libc)
        return native_confstr(name)

    os.uname = uname
    os.confstr = confstr
    sys.implementation._multiarch = target["multiarch"]  # type: ignore[attr-defined]
    importlib.machinery.EXTENSION_SUFFIXES[:] = target["suffixes"]
    # Asked before this (3.12+ also keeps a flag): asked again.
    forget: dict[str, dict[str, object]] = {"platform": {"_uname_cache": None},
              "sysconfig": {"_CONFIG_VARS": None, "_CONFIG_VARS_INITIALIZED": False}}  # fmt: skip
    for name, attrs in forget.items():
        module = sys.modules.get(name)
        for attr, value in attrs.items():
            if module is not None and hasattr(module, attr):
                setattr(module, attr, value)
    _log(f"native-{target['kind']} {target['backend']}")


if getattr(sys.implementation, "_multiarch", "") == "x86_64-linux-gnu":
    _as_target()
else:
    _dispatch()
