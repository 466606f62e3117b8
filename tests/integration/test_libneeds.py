"""What a wheel needs besides Python: a sdist whose extension links an OpenMP runtime (libgomp),
which the board's base does not have. The build finds the missing library with the target's own
loader in the runtime image, maps it to the package that shipped it in the build stage, installs
that in the runtime image (the smoke test imports the extension there), records it in
manifest.json and prints the board's `apt install` line; upload prints it with the pip line."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from .conftest import bootstrapped_build, dockerarch

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "omp-demo"
version = "1.0"
description = "An extension that links libgomp, for the tests"
"""
SETUP = """\
from setuptools import Extension, setup

setup(ext_modules=[Extension("omp_demo", ["omp_demo.c"], extra_compile_args=["-fopenmp"],
                             extra_link_args=["-fopenmp"])])
"""
SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <omp.h>

/* The sum of 1..n in parallel: OpenMP's runtime really runs. */
static PyObject *parallel_sum(PyObject *self, PyObject *args) {
    long n, total = 0;
    if (!PyArg_ParseTuple(args, "l", &n)) return NULL;
    #pragma omp parallel for reduction(+:total)
    for (long i = 1; i <= n; i++) total += i;
    return Py_BuildValue("(li)", total, omp_get_max_threads());
}

static PyMethodDef methods[] = {{"parallel_sum", parallel_sum, METH_VARARGS, NULL}, {NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "omp_demo", NULL, -1, methods};
PyMODINIT_FUNC PyInit_omp_demo(void) { return PyModule_Create(&module); }
"""


@pytest.fixture(scope="module")
def omp_build(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str], Path]:
    project = tmp_path_factory.mktemp("omp-demo")
    for name, text in {
        "pyproject.toml": PYPROJECT,
        "setup.py": SETUP,
        "omp_demo.c": SOURCE,
    }.items():
        (project / name).write_text(text)
    out, done = bootstrapped_build(tmp_path_factory, "dist", str(project), "armv7")
    return out, done, project


def test_a_library_the_base_lacks_is_found_installed_and_named(
    omp_build: tuple[Path, subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    out, done, project = omp_build
    said = " ".join(done.stderr.split())
    assert "the artifacts need libgomp.so.1, which the base lacks: installing libgomp1" in said
    assert "on a board: apt install libgomp1" in said
    (result,) = (out / "debian-armv7").iterdir()
    manifest = json.loads((result / "manifest.json").read_text())
    assert manifest["needs_apt"] == ["libgomp1"]
    assert manifest["smoke"]  # the smoke test imported it, in the runtime image with libgomp1
    # The runtime image boards pull runs it: OpenMP's runtime sums in parallel under QEMU.
    run = subprocess.run(
        ["docker", "run", "--rm", "--platform", "linux/arm/v7", manifest["image"]["tag"],
         "python3", "-c", "import omp_demo; print(*omp_demo.parallel_sum(10000))"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    total, threads = (int(word) for word in run.stdout.split())
    assert total == 10000 * 10001 // 2 and threads >= 1  # 32-bit long on armv7
    # The index carries it (Requires-External, PEP 345) and the board lines name it.
    run = f"l{uuid.uuid4().hex[:8]}"
    config = tmp_path / "registry.yaml"
    config.write_text(f"index:\n  url: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/\n"
                      f"  simple: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/+simple/\n")  # fmt: skip
    env = {"DOCKERARCH_REGISTRY_CONFIG": str(config)}
    select = ("wheel", "--package", str(project), "--arch", "armv7", "--out", str(out))
    uploaded = dockerarch("upload", *select, env=env)
    assert uploaded.returncode == 0, uploaded.stderr
    assert "apt install libgomp1" in uploaded.stderr
    session = requests.Session()
    session.trust_env = False
    release = session.get(f"http://127.0.0.1:3141/dockerarch/{run}-debian-armv7/omp-demo/1.0",
                          headers={"Accept": "application/json"}, timeout=30)  # fmt: skip
    assert release.json()["result"]["requires_external"] == ["libgomp1"]
    # And the static archive (no server).
    archived = dockerarch("upload", *select, "--archive", str(tmp_path / "a"))
    assert archived.returncode == 0, archived.stderr
    assert "on a debian-armv7 board: apt install libgomp1" in archived.stderr
    page = json.loads((tmp_path / "a/debian-armv7/simple/omp-demo/index.json").read_text())
    assert page["files"][0]["_needs_apt"] == ["libgomp1"]


def test_a_wheel_that_needs_nothing_more_names_nothing(
    demo_dist: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """zstandard's extension needs only libc: the check ran and names no package."""
    out, done = demo_dist
    for target in ("debian-armv7", "debian-aarch64"):
        manifest = json.loads((out / target / "zstandard-0.23.0" / "manifest.json").read_text())
        assert manifest["needs_apt"] == []
    assert "apt install" not in done.stderr
