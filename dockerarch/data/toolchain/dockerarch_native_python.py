"""dockerarch_native_python: code generators of a hybrid build run in the native Python.

Loaded by the emulated build stage's sitecustomize (use-native-drivers appends the import), so
at every start of the stage's Python, in PEP 517 build environments (venvs without the system's
site-packages) too. When the command line runs one of the generators the recipe names in
$DOCKERARCH_NATIVE_PYTHON (comma-separated: module names run with -m, such as torchgen.gen or
cython, or script paths matched at the end, such as tools/setup_helpers/generate_code.py or a
build environment's bin/cython, which meson and ninja start), it re-executes the same command
line in /usr/lib/dockerarch/bin/python-native: the x86-64 interpreter of the same version, on
the stage's own pure-Python files, started as the same environment's python when the generator
runs in a venv (its pyvenv.cfg, its packages). Generators read and write text files, so what
they write does not depend on the CPU; what they could ask of the machine, os.uname() (Cython's
compile-time UNAME_MACHINE), answers as the target's, in that process only. A package's compiled
modules for the target cannot load there: in a build environment they first get their x86-64
twins (dockerarch_native_backend.twins; one generator at a time), and a module still without one
is passed over for the Python source beside it (Cython's wheels ship both); a module with
neither sends the generator back to the emulated interpreter ("emulated-python NAME WHY").
Everything else (setup.py, sysconfig questions, anything that
imports the target's compiled modules) stays in the emulated interpreter. Each re-execution is
recorded in $DOCKERARCH_DRIVERS_LOG ("native-python NAME").
"""

from __future__ import annotations

import os
import sys

NATIVE = "/usr/lib/dockerarch/bin/python-native"
RUNNING = "DOCKERARCH_NATIVE_PYTHON_RUNNING"
TARGET = "DOCKERARCH_GENERATOR_TARGET"  # "MACHINE EMULATED-PYTHON", for the native side
# Interpreter options that may stand before -m or the script, taking no argument.
_FLAGS = {"-b", "-bb", "-B", "-d", "-E", "-i", "-I", "-O", "-OO", "-P", "-q", "-s", "-S", "-u",
          "-v", "-x"}  # fmt: skip


def generator(argv: list[str], names: list[str]) -> str | None:
    """Which of ``names`` the command line ``argv`` (the interpreter's arguments) runs."""
    args = list(argv)
    while args and args[0] in _FLAGS:
        args.pop(0)
    if not args:
        return None
    if args[0] == "-m" and len(args) > 1:
        module = args[1]
    elif args[0].startswith("-m") and len(args[0]) > 2:
        module = args[0][2:]
    else:
        module = None
    for name in names:
        if name.endswith(".py") or "/" in name:  # a script, by its path
            if module is None and (args[0] == name or args[0].endswith("/" + name)):
                return name
        elif module == name:
            return name
    return None


def _dispatch() -> None:
    wanted = os.environ.get("DOCKERARCH_NATIVE_PYTHON", "")
    if not wanted or os.environ.get(RUNNING) or not os.access(NATIVE, os.X_OK):
        return
    name = generator(sys.orig_argv[1:], [n for n in wanted.split(",") if n])
    if name is None:
        return
    os.environ[RUNNING] = name
    os.environ[TARGET] = f"{os.uname().machine} {os.path.realpath(sys.executable)}"
    # In a venv (a build environment), started as its python: the native interpreter then finds
    # its pyvenv.cfg and packages; elsewhere as itself (the stage's /usr).
    in_venv = sys.prefix != sys.base_prefix
    os.execv(NATIVE, [sys.executable if in_venv else NATIVE, *sys.orig_argv[1:]])


def _as_target() -> None:
    """In the native interpreter started by _dispatch: os.uname() answers the target's machine;
    in a build environment, the target's compiled modules get their x86-64 twins (one generator
    at a time: ninja starts several), or the generator goes back to the emulated interpreter
    when one is left with neither a twin nor its Python source."""
    machine, _, emulated = os.environ.pop(TARGET, "").partition(" ")
    if not machine:
        return
    name = os.environ.get(RUNNING, "")
    backend = sys.modules.get("dockerarch_native_backend")  # imported first by sitecustomize
    if backend is None:
        return
    if sys.prefix != sys.base_prefix:
        import fcntl
        import site

        sites = [d for d in site.getsitepackages() if os.path.isdir(d)]
        why = None
        if sites:
            with open(os.path.join(sites[0], ".dockerarch-twins.lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                why = backend.twins(sites)
        if why is not None:
            backend._log(f"emulated-python {name} {why}")
            os.execv(emulated, [sys.executable, *sys.orig_argv[1:]])
    backend.skip_foreign_modules()
    backend.answer_machine(machine)
    backend._log(f"native-python {name}")


if getattr(sys.implementation, "_multiarch", "") == "x86_64-linux-gnu":
    _as_target()
else:
    _dispatch()
