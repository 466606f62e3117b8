"""The native PEP 517 backend of hybrid builds for aarch64 (data/toolchain/dockerarch_native_backend.py):
a setuptools, a scikit-build-core and a meson-python package, and two whose builds import a
compiled build requirement (cffi generating an API-mode module's C, numpy's C API), written here,
each built twice for aarch64: with the backend in the native Python (the default; cffi and numpy
then get their x86-64 twins) and emulated (--set BACKEND=emulated). Nothing may change but time:
the wheel's name (its tag), its file list, every shared object's dynamic symbols and loadable
section sizes, and every other file byte for byte (cffi's generated C, what each build recorded
of the answers it asked: platform, machine, extension suffix, pointer size: the target's)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from dockerarch.pipconfig import default_index

from .conftest import dockerarch, dockerarch_each
from .settest_index import CF, serve, write_index
from .shapes import elf_shape
from .test_native_cython import FILES as CYTHON_FILES

MODULE_C = """\
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong((long)sizeof(void *)); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "NAME", NULL, -1, methods};
PyMODINIT_FUNC PyInit_NAME(void) { return PyModule_Create(&module); }
"""
# What the build asked its Python, written into the wheel: the emulated route's answers are the
# target's by construction; the native route must give the same.
ASKED = """\
import importlib.machinery, json, os, platform, struct, sys, sysconfig
asked = {
    "machine": platform.machine(), "uname": os.uname().machine,
    "platform": sysconfig.get_platform(), "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
    "soabi": sysconfig.get_config_var("SOABI"), "cc": sysconfig.get_config_var("CC"),
    "multiarch": sysconfig.get_config_var("MULTIARCH"), "include": sysconfig.get_paths()["include"],
    "suffixes": importlib.machinery.EXTENSION_SUFFIXES, "maxsize": sys.maxsize,
    "pointer": struct.calcsize("P"),
}
"""


def pyproject(requires: str, backend: str, name: str, *more: str) -> str:
    listed = ", ".join(f'"{r}"' for r in (requires, *more))
    return (f'[build-system]\nrequires = [{listed}]\nbuild-backend = "{backend}"\n\n'
            f'[project]\nname = "{name}"\nversion = "1.0"\n')  # fmt: skip


PACKAGES = {
    "setuptools": {
        "pyproject.toml": pyproject(
            "setuptools>=61", "setuptools.build_meta", "dockerarch-backend-st"
        ),
        "setup.py": ASKED
        + """\
from setuptools import Extension, setup
os.makedirs("st_probe", exist_ok=True)
with open("st_probe/asked.json", "w") as f:
    json.dump(asked, f, sort_keys=True)
open("st_probe/__init__.py", "w").close()
setup(packages=["st_probe"], package_data={"st_probe": ["asked.json"]},
      ext_modules=[Extension("st_probe._st", ["st.c"])])
""",
        "st.c": MODULE_C.replace("NAME", "_st"),
    },
    "scikit-build-core": {
        "pyproject.toml": pyproject(
            "scikit-build-core>=0.10", "scikit_build_core.build", "dockerarch-backend-sk"
        ),
        "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.15)
project(${SKBUILD_PROJECT_NAME} LANGUAGES C)
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
python_add_library(_sk MODULE sk.c WITH_SOABI)
file(WRITE ${CMAKE_BINARY_DIR}/asked.txt
     "soabi=${SKBUILD_SOABI} python_soabi=${Python_SOABI} processor=${CMAKE_SYSTEM_PROCESSOR} "
     "state=${SKBUILD_STATE}\\n")
install(TARGETS _sk DESTINATION .)
install(FILES ${CMAKE_BINARY_DIR}/asked.txt DESTINATION sk_asked)
""",
        "sk.c": MODULE_C.replace("NAME", "_sk"),
    },
    "meson-python": {
        "pyproject.toml": pyproject("meson-python", "mesonpy", "dockerarch-backend-me"),
        "meson.build": """\
project('dockerarch-backend-me', 'c')
py = import('python').find_installation(pure: false)
py.extension_module('_me', 'me.c', install: true)
conf = configuration_data()
conf.set('cpu', host_machine.cpu_family())
conf.set('suffix', py.get_variable('EXT_SUFFIX'))
configure_file(output: 'me_asked.txt', configuration: conf, input: 'me_asked.txt.in',
               install: true, install_dir: py.get_install_dir())
""",
        "me_asked.txt.in": "cpu=@cpu@ suffix=@suffix@\n",
        "me.c": MODULE_C.replace("NAME", "_me"),
    },
    # cffi's API mode: the build imports cffi (its _cffi_backend compiled for the target) to
    # generate the module's C, kept in the wheel to compare.
    "cffi": {
        # no build-backend: setuptools' __legacy__ object, which uv imports `from ... import`
        "pyproject.toml": pyproject(
            "setuptools>=61", "setuptools.build_meta", "dockerarch-backend-cf", "cffi>=1.17"
        ).replace('build-backend = "setuptools.build_meta"\n', ""),
        "setup.py": """\
import os
from cffi import FFI
from setuptools import Extension, setup
ffi = FFI()
ffi.cdef(\"\"\"
struct cf_point { int x; long y; ...; };
typedef enum { CF_RED, CF_GREEN = 5, ... } cf_colour;
#define CF_LIMIT ...
long cf_sum(struct cf_point *p);
double cf_scale(double v, long double k);
\"\"\")
ffi.set_source("cf_pkg._cf", \"\"\"
struct cf_point { char tag; int x; long y; };
typedef enum { CF_RED, CF_GREEN = 5, CF_BLUE } cf_colour;
#define CF_LIMIT (1L << 40)
static long cf_sum(struct cf_point *p) { return p->x + p->y; }
static double cf_scale(double v, long double k) { return (double)(v * k); }
\"\"\")
os.makedirs("cf_pkg", exist_ok=True)
open("cf_pkg/__init__.py", "w").close()
ffi.emit_c_code("cf_pkg/_cf_generated.c")
setup(packages=["cf_pkg"], package_data={"cf_pkg": ["_cf_generated.c"]},
      ext_modules=[Extension("cf_pkg._cf", ["cf_pkg/_cf_generated.c"])])
""",
    },
    # numpy's C API: headers and include path from the numpy the build imports (the target's).
    "numpy": {
        "pyproject.toml": pyproject(
            "setuptools>=61", "setuptools.build_meta", "dockerarch-backend-np", "numpy>=2"
        ),
        "setup.py": """\
import json, os
import numpy
from setuptools import Extension, setup
os.makedirs("np_pkg", exist_ok=True)
open("np_pkg/__init__.py", "w").close()
with open("np_pkg/asked.json", "w") as f:
    json.dump({"numpy": numpy.__version__, "intp": numpy.dtype(numpy.intp).itemsize,
               "include": os.path.relpath(numpy.get_include(), os.path.dirname(numpy.__file__))},
              f, sort_keys=True)
setup(packages=["np_pkg"], package_data={"np_pkg": ["asked.json"]},
      ext_modules=[Extension("np_pkg._np", ["np.c"], include_dirs=[numpy.get_include()])])
""",
        "np.c": """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
static PyObject *total(PyObject *self, PyObject *args) {
    PyObject *in;
    if (!PyArg_ParseTuple(args, "O", &in)) return NULL;
    PyArrayObject *a = (PyArrayObject *)PyArray_FROM_OTF(in, NPY_DOUBLE, NPY_ARRAY_IN_ARRAY);
    if (!a) return NULL;
    double s = 0; npy_intp n = PyArray_SIZE(a); double *d = (double *)PyArray_DATA(a);
    for (npy_intp i = 0; i < n; i++) s += d[i];
    Py_DECREF(a);
    return Py_BuildValue("dn", s, (Py_ssize_t)sizeof(npy_longdouble));
}
static PyMethodDef methods[] = {{"total", total, METH_VARARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_np", NULL, -1, methods};
PyMODINIT_FUNC PyInit__np(void) { import_array(); return PyModule_Create(&module); }
""",
    },
}
# Cython: the build cythonizes (Cython's compiled modules, the target's wheel), the C it wrote
# kept in the wheel.
PACKAGES["cython"] = {
    "pyproject.toml": pyproject(
        "setuptools>=61", "setuptools.build_meta", "dockerarch-backend-cy", "Cython>=3"
    ),
    "setup.py": """\
import os, shutil
from Cython.Build import cythonize
from setuptools import setup
os.makedirs("cy_pkg", exist_ok=True)
open("cy_pkg/__init__.py", "w").close()
shutil.copy("cy.pyx", "cy_pkg/_cy.pyx")
modules = cythonize(["cy_pkg/_cy.pyx"], compiler_directives={"language_level": 3})
shutil.copy("cy_pkg/_cy.c", "cy_pkg/_cy_generated.c")
setup(packages=["cy_pkg"], package_data={"cy_pkg": ["_cy_generated.c"]}, ext_modules=modules)
""",
    "cy.pyx": CYTHON_FILES["cy.pyx"],
}
TWINS = {"cffi": "cffi", "numpy": "numpy", "cython": "Cython"}  # package: its twinned requirement
ROUTES = ("native", "emulated")
# A build requirement with a compiled module and no x86-64 wheel anywhere (the setuptools
# package's aarch64 wheel built above, required by its file): no twin, so the hooks go back to
# the emulated interpreter, which imports it.
REFUSED = {
    "pyproject.toml": pyproject(
        "setuptools>=61",
        "setuptools.build_meta",
        "dockerarch-backend-refused",
        "dockerarch-backend-st @ file:///src/package/WHEEL",
    ),
    "setup.py": """\
from st_probe import _st
from setuptools import Extension, setup
setup(ext_modules=[Extension("_re", ["re.c"], define_macros=[("POINTER", str(_st.answer()))])])
""",
    "re.c": MODULE_C.replace("NAME", "_re"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Each package's aarch64 wheel result directory, by (backend kind, route); the command's
    progress in its progress.txt."""
    done = dockerarch("base", "bootstrap", "--arch", "aarch64", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr
    builds: dict[tuple[str, str], Path] = {}
    for kind, files in PACKAGES.items():
        src = tmp_path_factory.mktemp(kind.replace("-", ""))
        for name, text in files.items():
            (src / name).write_text(text)
        for route in ROUTES:
            builds[kind, route] = src
    outs = {key: tmp_path_factory.mktemp("-".join(key).replace("-", "")) for key in builds}
    runs = dockerarch_each([("build", "wheel", "--package", str(src), "--arch", "aarch64", "--set",
                             f"BACKEND={route}", "--out", str(outs[kind, route]))
                            for (kind, route), src in builds.items()])  # fmt: skip
    results: dict[tuple[str, str], Path] = {}
    for key, done in zip(builds, runs, strict=True):
        assert done.returncode == 0, done.stderr[-3000:]
        (result,) = (outs[key] / "debian-aarch64").glob("dockerarch_backend_*-1.0")
        (outs[key] / "progress.txt").write_text(done.stderr)
        results[key] = result
    return results


def _wheel(result: Path) -> Path:
    (wheel,) = result.glob("*.whl")
    return wheel


@pytest.mark.parametrize("kind", sorted(PACKAGES))
def test_the_native_backend_changes_nothing_but_time(
    kind: str, built: dict[tuple[str, str], Path]
) -> None:
    native, emulated = (_wheel(built[kind, route]) for route in ROUTES)
    assert native.name == emulated.name and native.name.endswith("-cp311-cp311-linux_aarch64.whl")
    with zipfile.ZipFile(native) as n, zipfile.ZipFile(emulated) as e:
        names = sorted(n.namelist())
        assert names == sorted(e.namelist())
        shared = [x for x in names if x.endswith(".so")]
        assert shared and all(x.endswith(".cpython-311-aarch64-linux-gnu.so") for x in shared)
        for name in shared:
            assert elf_shape(n.read(name)) == elf_shape(e.read(name)), name
        # everything else byte for byte: what the build asked, cffi's generated C, metadata
        others = [x for x in names if not x.endswith((".so", "/", "/RECORD"))]
        assert any("asked" in x or x.endswith("_generated.c") for x in others)
        for name in others:
            assert n.read(name) == e.read(name), name
    # Where each ran: the default route's hooks ran natively, and said so; the other not at all.
    drivers = {r: json.loads((built[kind, r] / "manifest.json").read_text())["drivers"]
               for r in ROUTES}  # fmt: skip
    assert sum(drivers["native"]["native_backends"].values()) >= 2  # get_requires + build_wheel
    if kind == "cffi":
        assert list(drivers["native"]["native_backends"]) == ["setuptools.build_meta:__legacy__"]
    assert not drivers["native"]["emulated_backends"]
    assert not drivers["emulated"]["native_backends"]
    # the compiled build requirement ran natively as its x86-64 twin, the version the target's is
    twins = drivers["native"]["native_twins"]
    assert list(twins) == ([TWINS[kind]] if kind in TWINS else [])
    assert not drivers["emulated"]["native_twins"]
    if kind in TWINS:
        with zipfile.ZipFile(native) as n:
            record = n.read(next(x for x in n.namelist() if x.endswith("/RECORD"))).decode()
        assert "x86_64" not in record  # nothing of the twin reached the wheel
    # uv's interpreter query: answered natively when asked (uv keeps the answer in its cache
    # mount, so a later build may not ask), never in the emulated route
    assert not drivers["emulated"]["native_queries"]
    said = (built[kind, "native"].parents[1] / "progress.txt").read_text()
    assert "native PEP 517 backend:" in said
    assert (
        "native PEP 517 backend:"
        not in (built[kind, "emulated"].parents[1] / "progress.txt").read_text()
    )


def test_setuptools_asked_the_target_s_questions(built: dict[tuple[str, str], Path]) -> None:
    with zipfile.ZipFile(_wheel(built["setuptools", "native"])) as wheel:
        asked = json.loads(wheel.read("st_probe/asked.json"))
    assert asked["machine"] == asked["uname"] == "aarch64"
    assert asked["platform"] == "linux-aarch64" and asked["multiarch"] == "aarch64-linux-gnu"
    assert asked["ext_suffix"] == ".cpython-311-aarch64-linux-gnu.so" == asked["suffixes"][0]
    assert asked["cc"].startswith("aarch64-linux-gnu-gcc") and asked["pointer"] == 8


def test_a_compiled_build_requirement_without_a_twin_keeps_the_backend_emulated(
    built: dict[tuple[str, str], Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    src = tmp_path_factory.mktemp("refused")
    st_wheel = _wheel(built["setuptools", "native"])
    (src / st_wheel.name).write_bytes(st_wheel.read_bytes())
    for name, text in REFUSED.items():
        (src / name).write_text(text.replace("WHEEL", st_wheel.name))
    out = tmp_path_factory.mktemp("refusedout")
    done = dockerarch("build", "wheel", "--package", str(src), "--arch", "aarch64", "--out",
                      str(out), timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = (out / "debian-aarch64").glob("dockerarch_backend_refused-1.0")
    assert _wheel(result).name == "dockerarch_backend_refused-1.0-cp311-cp311-linux_aarch64.whl"
    drivers = json.loads((result / "manifest.json").read_text())["drivers"]
    assert not drivers["native_backends"] and not drivers["native_twins"]
    why = drivers["emulated_backends"]["setuptools.build_meta"]
    assert why.startswith("no x86-64 wheel of dockerarch-backend-st 1.0 ("), why
    assert "PEP 517 backend setuptools.build_meta ran emulated: no x86-64 wheel" in done.stderr


def test_a_set_member_s_twin_comes_from_the_set(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An aarch64 set whose member (a cffi API-mode package from the test's loopback index)
    builds with cffi: the set pins cffi for the build environment, puts that version's x86-64
    wheel beside the aarch64 one in the member's context, and the member's backend runs natively
    with that twin, though its build takes wheels from the set alone (no index)."""
    root = tmp_path_factory.mktemp("twinindex")
    write_index(root)
    out = tmp_path_factory.mktemp("twinset")
    (out / "requirements.txt").write_text(f"{CF}\n")
    with serve(root) as index:
        done = dockerarch("build", "wheel", "-r", str(out / "requirements.txt"), "--index-url",
                          index, "--extra-index-url", default_index(), "--arch", "aarch64",
                          "--out", str(out), "--progress", "plain", timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    made = json.loads(
        (out / "debian-aarch64" / "sets" / "requirements" / "manifest.json").read_text()
    )
    (member,) = [m for m in made["distributions"] if m["name"] == CF]
    (cffi,) = [pin for pin in member["build_env"] if pin.startswith("cffi==")]
    result = out / "debian-aarch64" / "dockerarch_settest_cf-1.0"
    drivers = json.loads((result / "manifest.json").read_text())["drivers"]
    assert sum(drivers["native_backends"].values()) >= 2 and not drivers["emulated_backends"]
    assert drivers["native_twins"] == {"cffi": cffi.removeprefix("cffi==")}
    assert "x86-64 compiled twins of build requirements: cffi" in done.stderr
