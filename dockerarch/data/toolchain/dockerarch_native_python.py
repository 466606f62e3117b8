"""dockerarch_native_python: code generators of a hybrid build run in the native Python.

Loaded (by a .pth file use-native-drivers writes) at every start of the emulated build stage's
Python. When the command line runs one of the generators the recipe names in
$DOCKERARCH_NATIVE_PYTHON (comma-separated: module names run with -m, such as torchgen.gen, or
script paths matched at the end, such as tools/setup_helpers/generate_code.py), it re-executes
the same command line in /usr/lib/dockerarch/bin/python-native: the x86-64 interpreter of the
same version, on the stage's own pure-Python files. Generators read and write text files, so
what they write does not depend on the CPU; everything else (setup.py, sysconfig questions,
anything that imports the target's compiled modules) stays in the emulated interpreter. Each
re-execution is recorded in $DOCKERARCH_DRIVERS_LOG ("native-python NAME").
"""

from __future__ import annotations

import os
import sys

NATIVE = "/usr/lib/dockerarch/bin/python-native"
RUNNING = "DOCKERARCH_NATIVE_PYTHON_RUNNING"
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
        if name.endswith(".py"):
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
    log = os.environ.get("DOCKERARCH_DRIVERS_LOG")
    if log and os.access(os.path.dirname(log), os.W_OK):
        with open(log, "a") as f:
            f.write(f"native-python {name}\n")
    os.environ[RUNNING] = "1"
    os.execv(NATIVE, [NATIVE, *sys.orig_argv[1:]])


_dispatch()
