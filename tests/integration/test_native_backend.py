"""The native PEP 517 backend of hybrid builds for aarch64 (data/toolchain/dockerarch_native_backend.py):
a setuptools, a scikit-build-core and a meson-python package, written here, each built twice for
aarch64: with the backend in the native Python (the default) and emulated (--set
BACKEND=emulated). Nothing may change but time: the wheel's name (its tag), its file list, every
shared object's dynamic symbols and loadable section sizes, and what each build recorded of the
answers the build asked (platform, machine, extension suffix, pointer size: the target's)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from .conftest import dockerarch
from .shapes import elf_shape

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


def pyproject(requires: str, backend: str, name: str) -> str:
    return (f'[build-system]\nrequires = ["{requires}"]\nbuild-backend = "{backend}"\n\n'
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
}
ROUTES = ("native", "emulated")
# A build requirement with compiled modules (cffi's _cffi_backend, the target's wheel), imported
# by the build: the native interpreter cannot load it, so the hooks go back to the emulated one.
REFUSED = {
    "pyproject.toml": pyproject(
        "setuptools>=61", "setuptools.build_meta", "dockerarch-backend-cf"
    ).replace('requires = ["setuptools>=61"]', 'requires = ["setuptools>=61", "cffi"]'),
    "setup.py": """\
import cffi
from setuptools import Extension, setup
setup(ext_modules=[Extension("_cf", ["cf.c"], define_macros=[("CFFI", '"' + cffi.__version__ + '"')])])
""",
    "cf.c": MODULE_C.replace("NAME", "_cf"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Each package's aarch64 wheel result directory, by (backend kind, route); the command's
    progress in its progress.txt."""
    done = dockerarch("base", "bootstrap", "--arch", "aarch64", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr
    results: dict[tuple[str, str], Path] = {}
    for kind, files in PACKAGES.items():
        src = tmp_path_factory.mktemp(kind.replace("-", ""))
        for name, text in files.items():
            (src / name).write_text(text)
        for route in ROUTES:
            out = tmp_path_factory.mktemp(f"{kind}-{route}".replace("-", ""))
            done = dockerarch("build", "wheel", "--package", str(src), "--arch", "aarch64",
                              "--set", f"BACKEND={route}", "--out", str(out), timeout=1800)  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
            (result,) = (out / "debian-aarch64").glob("dockerarch_backend_*-1.0")
            (out / "progress.txt").write_text(done.stderr)
            results[kind, route] = result
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
        asked = [x for x in names if "asked" in x and not x.endswith("/")]
        assert asked
        for name in asked:
            assert n.read(name) == e.read(name), name
    # Where each ran: the default route's hooks ran natively, and said so; the other not at all.
    drivers = {r: json.loads((built[kind, r] / "manifest.json").read_text())["drivers"]
               for r in ROUTES}  # fmt: skip
    assert sum(drivers["native"]["native_backends"].values()) >= 2  # get_requires + build_wheel
    assert not drivers["native"]["emulated_backends"]
    assert not drivers["emulated"]["native_backends"]
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


def test_a_compiled_build_requirement_keeps_the_backend_emulated(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    src = tmp_path_factory.mktemp("refused")
    for name, text in REFUSED.items():
        (src / name).write_text(text)
    out = tmp_path_factory.mktemp("refusedout")
    done = dockerarch("build", "wheel", "--package", str(src), "--arch", "aarch64", "--out",
                      str(out), timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = (out / "debian-aarch64").glob("dockerarch_backend_cf-1.0")
    assert _wheel(result).name == "dockerarch_backend_cf-1.0-cp311-cp311-linux_aarch64.whl"
    drivers = json.loads((result / "manifest.json").read_text())["drivers"]
    assert not drivers["native_backends"]
    why = drivers["emulated_backends"]["setuptools.build_meta"]
    assert why.startswith("the build environment has a compiled module for the target (")
    assert "_cffi_backend" in why and "aarch64" in why
    assert "PEP 517 backend setuptools.build_meta ran emulated:" in done.stderr
