"""pip-install's install from local files, run by the x86-64 Python of a hybrid build's native
root in an emulated ARM stage: the toolchain's x86-64 uv installs the wheels into the stage's
Python, and this interpreter byte-compiles what uv wrote, in one native process.

Every program an emulated stage starts is a QEMU start (mktemp, find, wc, date: 40-60 ms each),
and asking the stage's Python where its packages go is an emulated interpreter start (0.4-0.5 s
on 2 cores). Here the only emulated start is the one uv makes itself, to ask the stage's Python
for its tags and install scheme; uv keeps that answer in a cache directory of this run, and
`uv pip show` reads where it installed from there (natively, in milliseconds).

Where to look comes from uv (the scheme of the stage's interpreter); what to compile from the
file system: the .py files under those directories that are newer than the install. Package
metadata (RECORD, the names uv printed) chooses nothing on the file system.

Usage: dockerarch_uv_install.py LOADER LIBDIR UV PIP_INSTALL_ARG...
Exits 3, having done nothing, when these arguments may ask an index (any requirement that is
not a wheel file whose metadata asks for nothing, without --no-index) or uv does not start:
pip-install then runs the stage's pip. Standard library only.
"""

from __future__ import annotations

import compileall
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator

NOT_FOR_UV = 3
PYTHON = "/usr/bin/python3"  # the stage's interpreter
# uv's line for each package it installed: " + NAME==VERSION ..."
_INSTALLED = re.compile(r"^ \+ ([A-Za-z0-9][A-Za-z0-9._-]*)==", re.MULTILINE)
_LOCATION = re.compile(r"^Location: (/.+)$", re.MULTILINE)


def local_only(args: list[str]) -> list[str] | None:
    """uv's arguments for an install that needs no index (pip's spelling of them, with
    --no-index added to a list of wheel files that ask for nothing), or None."""
    if "--no-index" in args:
        return [a for a in args if a != "--no-cache-dir"]
    wheels, rest = [], iter(args)
    for arg in rest:
        if arg in ("--find-links", "-f"):
            next(rest, None)
        elif arg.startswith("-"):
            if arg != "--no-cache-dir":
                return None
        elif arg.endswith(".whl"):
            wheels.append(arg)
        else:
            return None  # a requirement: an index may be asked
    if not wheels or any(asks_for_something(w) for w in wheels):
        return None
    return ["--no-index", *(a for a in args if a != "--no-cache-dir")]


def asks_for_something(wheel: str) -> bool:
    """Whether the wheel's metadata has a Requires-Dist (or cannot be read)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            found = [n for n in archive.namelist()
                     if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]  # fmt: skip
            if len(found) != 1:
                return True
            text = archive.read(found[0])
    except (OSError, zipfile.BadZipFile):
        return True
    return any(line.startswith(b"Requires-Dist:") for line in text.splitlines())


def newer_sources(tops: list[str], since_ns: int) -> Iterator[str]:
    """The .py files under ``tops`` written at or after ``since_ns``."""
    for top in tops:
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    try:
                        if os.lstat(path).st_mtime_ns >= since_ns:
                            yield path
                    except OSError:
                        continue


def byte_compile(paths: list[str]) -> None:
    """As pip does: forced, silent, and a file that does not compile (pip's own test data, a
    template) fails nothing: the emulated interpreter would refuse it the same way."""
    for path in paths:
        compileall.compile_file(path, force=True, quiet=2)


def site_directories() -> list[str]:
    """Where pip installs, as the stage's own (emulated) Python says: its scheme is its own."""
    asked = subprocess.run(
        [PYTHON, "-c", "import sysconfig; print(sysconfig.get_path('purelib')); "
         "print(sysconfig.get_path('platlib'))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return sorted({t for t in asked.stdout.splitlines() if os.path.isdir(t)})


def main(argv: list[str]) -> int:
    loader, libdir, uv_path, *args = argv
    uv = [loader, "--library-path", libdir, uv_path]
    wanted = local_only(args)
    if wanted is None:
        return NOT_FOR_UV
    try:
        subprocess.run([*uv, "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return NOT_FOR_UV
    print("pip-install: installing from local files with the x86-64 uv", flush=True)
    cache = tempfile.mkdtemp(prefix="dockerarch-uv.")
    # uv's lock of the environment goes to the temporary directory: this run's, not the image's /tmp
    environ = {**os.environ, "TMPDIR": cache}
    try:
        with tempfile.NamedTemporaryFile(prefix="dockerarch-stamp.") as stamp:
            since = os.fstat(stamp.fileno()).st_mtime_ns
            done = subprocess.run(
                [*uv, "pip", "install", "--python", PYTHON, "--break-system-packages",
                 "--cache-dir", cache, "--no-progress", *wanted],
                stderr=subprocess.PIPE, text=True, errors="replace", check=False, env=environ,
            )  # fmt: skip
        sys.stderr.write(done.stderr)
        sys.stderr.flush()
        if done.returncode != 0:  # uv's own failure (never the code that means "use pip")
            return done.returncode if done.returncode != NOT_FOR_UV else 1
        names = _INSTALLED.findall(done.stderr)
        if not names:
            return 0
        # The same cache: uv answers from the interpreter's facts it kept, no emulated start.
        shown = subprocess.run(
            [*uv, "pip", "show", "--python", PYTHON, "--cache-dir", cache, *names],
            capture_output=True, text=True, errors="replace", check=False, env=environ,
        )  # fmt: skip
        tops = sorted({t for t in _LOCATION.findall(shown.stdout) if os.path.isdir(t)})
        if shown.returncode != 0 or not tops:
            print("pip-install: uv did not say where it installed: asking the stage's Python",
                  flush=True)  # fmt: skip
            tops = site_directories()
        paths = list(newer_sources(tops, since))
        if paths:
            began = time.monotonic()
            byte_compile(paths)
            version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
            print(f"pip-install: byte-compiled the {len(paths)} Python files pip installed, "
                  f"natively ({version}), in {time.monotonic() - began:.0f} s", flush=True)  # fmt: skip
        return 0
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
