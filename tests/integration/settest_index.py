"""Small packages a wheel-set test writes, and a PEP 503 index on 127.0.0.1 serving them.

- ``dockerarch-settest-a``: a C extension whose wheel carries a header (``a_token.h``) written by
  its own build with a token drawn at build time, as numpy's wheel carries its headers;
- ``dockerarch-settest-b``: a C extension that needs ``a`` to build (its setup.py imports a and
  compiles against a's header, keeping the token) and at run time;
- ``dockerarch-settest-c``: pure Python, a wheel on the index;
- ``dockerarch-settest-broken``: an sdist whose C code does not compile;
- ``dockerarch-settest-f``: a C extension calling a Fortran routine, compiled with $FC (the
  hybrid build's gfortran) and linked with libgfortran, as scipy's are;
- ``dockerarch-settest-m``: f's Fortran and C built by meson-python, whose meson.build asks for
  Fortran as scipy's does (add_languages): its build stage needs a Fortran compiler wherever
  no cross gfortran is grafted (a native amd64 build, plain QEMU);
- ``dockerarch-settest-g``: pure Python that needs f at run time (imports it), as LightGBM needs
  scipy: its runtime image installs f with it, so it needs f's libgfortran5 too;
- ``dockerarch-settest-d``: pure Python whose setup.py asks for c at build time
  (setup_requires: a build requirement only its build knows, as opencv-python's cmake).
- ``dockerarch-settest-old``: pure Python, an sdist of metadata 1.1 with no pyproject.toml whose
  setup.py needs c at run time (install_requires), as RPi.GPIO's and other old sdists: only its
  build says what it needs.
- ``dockerarch-settest-cf``: a cffi API-mode module (cffi, from pip's default index, is its build
  requirement and its dependency): in an aarch64 set, the native PEP 517 backend's x86-64 twin
  of cffi comes from the set.

The sdists and the wheel are written byte by byte here (tarfile, zipfile): nothing is built or
fetched to make them. Build requirements the index does not have (setuptools) come from the next
index, pip's default.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

A, B, C, BROKEN, F, D, CF = ("dockerarch-settest-a", "dockerarch-settest-b", "dockerarch-settest-c",
                             "dockerarch-settest-broken", "dockerarch-settest-f",
                             "dockerarch-settest-d", "dockerarch-settest-cf")  # fmt: skip
G, M, OLD = "dockerarch-settest-g", "dockerarch-settest-m", "dockerarch-settest-old"

OLD_SETUP = f"""\
from setuptools import setup
setup(name="{OLD}", version="1.0", packages=["old_pkg"], install_requires=["dockerarch-settest-c"])
"""
A_SETUP = """\
import os, secrets
from setuptools import Extension, setup
os.makedirs("a_pkg/include", exist_ok=True)
with open("a_pkg/include/a_token.h", "w") as header:
    header.write('#define A_TOKEN "%s"\\n' % secrets.token_hex(8))
setup(packages=["a_pkg"], package_data={"a_pkg": ["include/*.h"]},
      ext_modules=[Extension("a_pkg._a", ["a_pkg/_a.c"], include_dirs=["a_pkg/include"])])
"""
A_INIT = """\
import os
from a_pkg._a import token
def get_include():
    return os.path.join(os.path.dirname(__file__), "include")
"""
A_C = """\
#include <Python.h>
#include "a_token.h"
static PyObject *token(PyObject *self, PyObject *args) { return PyUnicode_FromString(A_TOKEN); }
static PyMethodDef methods[] = {{"token", token, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_a", NULL, -1, methods};
PyMODINIT_FUNC PyInit__a(void) { return PyModule_Create(&module); }
"""
B_SETUP = """\
import a_pkg
from setuptools import Extension, setup
print("settest-b: compiling against", a_pkg.get_include(), "token", a_pkg.token())
setup(packages=["b_pkg"],
      ext_modules=[Extension("b_pkg._b", ["b_pkg/_b.c"], include_dirs=[a_pkg.get_include()])])
"""
B_INIT = "import a_pkg\nfrom b_pkg._b import a_token_seen\n"
B_C = """\
#include <Python.h>
#include "a_token.h"
static PyObject *seen(PyObject *self, PyObject *args) { return PyUnicode_FromString(A_TOKEN); }
static PyMethodDef methods[] = {{"a_token_seen", seen, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_b", NULL, -1, methods};
PyMODINIT_FUNC PyInit__b(void) { return PyModule_Create(&module); }
"""
BROKEN_SETUP = """\
from setuptools import Extension, setup
setup(ext_modules=[Extension("broken_pkg", ["broken.c"])])
"""


F_SETUP = """\
import os, subprocess
from setuptools import Extension, setup
subprocess.check_call([os.environ.get("FC", "gfortran"), "-O2", "-fPIC", "-c", "f_pkg/dot.f90",
                       "-o", "f_pkg/dot.o"])
setup(packages=["f_pkg"], ext_modules=[Extension("f_pkg._f", ["f_pkg/_f.c"],
      extra_objects=["f_pkg/dot.o"], libraries=["gfortran"])])
"""
F_DOT = """\
function f_dot(n, x, y) bind(C, name="f_dot") result(total)
  use iso_c_binding
  integer(c_int), value :: n
  real(c_double), intent(in) :: x(n), y(n)
  real(c_double) :: total
  character(len=32) :: text
  ! through libgfortran's formatted I/O: the extension needs libgfortran.so.5 on the board
  write(text, '(F20.6)') dot_product(x, y)
  read(text, *) total
end function f_dot
"""
F_C = """\
#include <Python.h>
double f_dot(int n, const double *x, const double *y);
static PyObject *dot(PyObject *self, PyObject *args) {
    double x[3] = {1.5, -2.0, 4.0}, y[3] = {2.0, 0.25, -1.5};
    return PyFloat_FromDouble(f_dot(3, x, y));
}
static PyMethodDef methods[] = {{"dot", dot, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_f", NULL, -1, methods};
PyMODINIT_FUNC PyInit__f(void) { return PyModule_Create(&module); }
"""


M_MESON = """\
project('dockerarch-settest-m', 'c', version: '1.0')
add_languages('fortran', native: false)
py = import('python').find_installation(pure: false)
py.extension_module('_m', ['m_pkg/_m.c', 'm_pkg/dot.f90'], install: true, subdir: 'm_pkg')
py.install_sources(['m_pkg/__init__.py'], subdir: 'm_pkg')
"""
M_PYPROJECT = """\
[build-system]
requires = ["meson-python"]
build-backend = "mesonpy"

[project]
name = "dockerarch-settest-m"
version = "1.0"
"""
M_C = F_C.replace('"_f"', '"_m"').replace("PyInit__f", "PyInit__m")


D_SETUP = """\
from setuptools import setup
setup(packages=["d_pkg"], setup_requires=["dockerarch-settest-c"])
"""

CF_SETUP = """\
from cffi import FFI
from setuptools import Extension, setup
ffi = FFI()
ffi.cdef("long cf_twice(long v);")
ffi.set_source("cf_pkg._cf", "static long cf_twice(long v) { return 2 * v; }")
ffi.emit_c_code("cf_pkg/_cf.c")
setup(packages=["cf_pkg"], ext_modules=[Extension("cf_pkg._cf", ["cf_pkg/_cf.c"])])
"""


def _pyproject(name: str, build: list[str], deps: list[str]) -> str:
    quoted = ", ".join(f'"{d}"' for d in deps)
    return (f'[build-system]\nrequires = [{", ".join(f"{chr(34)}{r}{chr(34)}" for r in build)}]\n'
            'build-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [{quoted}]\n')  # fmt: skip


def _pkg_info(name: str, deps: list[str]) -> str:
    return ("Metadata-Version: 2.2\n" f"Name: {name}\nVersion: 1.0\n"
            + "".join(f"Requires-Dist: {d}\n" for d in deps))  # fmt: skip


def sdist(directory: Path, name: str, files: dict[str, str]) -> Path:
    """NAME-1.0.tar.gz holding NAME-1.0/<files>."""
    base = name.replace("-", "_")
    path = directory / f"{base}-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{base}-1.0/{member}")
            info.size, info.mtime, info.mode = len(data), 1700000000, 0o644
            archive.addfile(info, io.BytesIO(data))
    return path


def pure_wheel(directory: Path, name: str, module: str, code: str) -> Path:
    """A py3-none-any wheel with one module, its METADATA, WHEEL and RECORD."""
    base = name.replace("-", "_")
    info = f"{base}-1.0.dist-info"
    files = {
        f"{module}.py": code,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: settest\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for member, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{member},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    path = directory / f"{base}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(zipfile.ZipInfo(member, (2023, 11, 14, 0, 0, 0)), text)
    return path


def write_index(root: Path) -> dict[str, Path]:
    """The projects' files and their PEP 503 pages under root/simple/; {name: file}."""
    files_dir = root / "files"
    files_dir.mkdir(parents=True)
    a_deps: list[str] = []
    b_deps = [A, C]
    made = {
        A: sdist(files_dir, A, {"pyproject.toml": _pyproject(A, ["setuptools"], a_deps),
                                "PKG-INFO": _pkg_info(A, a_deps), "setup.py": A_SETUP,
                                "a_pkg/__init__.py": A_INIT, "a_pkg/_a.c": A_C}),
        B: sdist(files_dir, B, {"pyproject.toml": _pyproject(B, ["setuptools", A], b_deps),
                                "PKG-INFO": _pkg_info(B, b_deps), "setup.py": B_SETUP,
                                "b_pkg/__init__.py": B_INIT, "b_pkg/_b.c": B_C}),
        C: pure_wheel(files_dir, C, "c_mod", "ANSWER = 42\n"),
        BROKEN: sdist(files_dir, BROKEN, {"pyproject.toml": _pyproject(BROKEN, ["setuptools"], []),
                                          "PKG-INFO": _pkg_info(BROKEN, []), "setup.py": BROKEN_SETUP,
                                          "broken.c": "this is not C;\n"}),
        F: sdist(files_dir, F, {"pyproject.toml": _pyproject(F, ["setuptools"], []),
                                "PKG-INFO": _pkg_info(F, []), "setup.py": F_SETUP,
                                "f_pkg/__init__.py": "from f_pkg._f import dot\n",
                                "f_pkg/dot.f90": F_DOT, "f_pkg/_f.c": F_C}),
        CF: sdist(files_dir, CF, {"pyproject.toml": _pyproject(CF, ["setuptools", "cffi"], ["cffi"]),
                                  "PKG-INFO": _pkg_info(CF, ["cffi"]), "setup.py": CF_SETUP,
                                  "cf_pkg/__init__.py": "from cf_pkg._cf import lib\n"}),
        G: sdist(files_dir, G, {"pyproject.toml": _pyproject(G, ["setuptools"], [F]),
                                "PKG-INFO": _pkg_info(G, [F]),
                                "setup.py": "from setuptools import setup\nsetup(packages=['g_pkg'])\n",
                                "g_pkg/__init__.py": "from f_pkg import dot\n"}),
        M: sdist(files_dir, M, {"pyproject.toml": M_PYPROJECT, "PKG-INFO": _pkg_info(M, []),
                                "meson.build": M_MESON, "m_pkg/__init__.py": "from m_pkg._m import dot\n",
                                "m_pkg/dot.f90": F_DOT, "m_pkg/_m.c": M_C}),
        OLD: sdist(files_dir, OLD, {"PKG-INFO": f"Metadata-Version: 1.1\nName: {OLD}\nVersion: 1.0\n",
                                    "setup.py": OLD_SETUP, "old_pkg/__init__.py": "from c_mod import ANSWER\n"}),
        D: sdist(files_dir, D, {"pyproject.toml": _pyproject(D, ["setuptools"], []),
                                "PKG-INFO": _pkg_info(D, []), "setup.py": D_SETUP,
                                "d_pkg/__init__.py": "VALUE = 'd'\n"}),
    }  # fmt: skip
    for name, path in made.items():
        page = root / "simple" / name
        page.mkdir(parents=True)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        page.joinpath("index.html").write_text(
            f'<html><body><a href="../../files/{path.name}#sha256={digest}">{path.name}</a>'
            "</body></html>\n"
        )
    return made


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """root served over HTTP on 127.0.0.1 (a free port); yields the simple index's URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
