"""Which command lines of the emulated Python are code generators the native one runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from dockerarch import paths

NAMES = ["torchgen.gen", "tools/setup_helpers/generate_code.py", "tools.pyi.gen_pyi"]


def _module() -> ModuleType:
    path = paths.data_path("toolchain") / "dockerarch_native_python.py"
    spec = importlib.util.spec_from_file_location("dockerarch_native_python", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # no DOCKERARCH_NATIVE_PYTHON here: it re-executes nothing
    return module


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        (["-m", "torchgen.gen", "--source-path", "aten/src/ATen"], "torchgen.gen"),
        (["-E", "-s", "-m", "torchgen.gen"], "torchgen.gen"),
        (["-mtools.pyi.gen_pyi", "--x"], "tools.pyi.gen_pyi"),
        (["/src/pytorch/tools/setup_helpers/generate_code.py", "--install-dir", "x"],
         "tools/setup_helpers/generate_code.py"),
        (["tools/setup_helpers/generate_code.py"], "tools/setup_helpers/generate_code.py"),
        (["-m", "torchgen.gen_executorch"], None),  # another module
        (["-m", "torchgen"], None),
        (["setup.py", "bdist_wheel"], None),  # the build itself stays emulated
        (["-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"], None),
        (["/x/mytools/setup_helpers/generate_code.py"], None),  # not at a path boundary
        ([], None),
    ],
)  # fmt: skip
def test_generators_are_recognised_by_module_or_script(argv: list[str], found: str | None) -> None:
    assert _module().generator(argv, NAMES) == found


CYTHON = ["bin/cython", "bin/cythonize", "cython", "Cython.Build.Cythonize"]


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        # meson and ninja start the build environment's script (its shebang: the venv's python)
        (["/root/.cache/uv/builds-v0/.tmpAbC/bin/cython", "-3", "x.pyx", "-o", "x.c"], "bin/cython"),
        (["/root/.cache/uv/builds-v0/.tmpAbC/bin/cythonize", "-i", "x.pyx"], "bin/cythonize"),
        (["-m", "cython", "x.pyx"], "cython"),
        (["-m", "Cython.Build.Cythonize", "x.pyx"], "Cython.Build.Cythonize"),
        (["/usr/bin/mycython", "x.pyx"], None),  # not at a path boundary
        (["-m", "Cython.Compiler.Main"], None),
        (["-c", "import Cython"], None),  # Cython imported by the build itself: the backend's
    ],
)  # fmt: skip
def test_cython_is_recognised_as_a_script_of_the_build_environment_or_a_module(
    argv: list[str], found: str | None
) -> None:
    assert _module().generator(argv, CYTHON) == found


def test_the_wheel_recipe_names_cython_and_recipes_accept_script_paths(tmp_path: Path) -> None:
    from dockerarch.errors import ConfigError
    from dockerarch.recipes import _native_python, load_recipes

    assert set(CYTHON) <= set(load_recipes()["wheel"].native_python)
    assert _native_python(["bin/cython", "tools/gen.py", "torchgen.gen"], tmp_path) == (
        "bin/cython", "tools/gen.py", "torchgen.gen")  # fmt: skip
    for bad in ("../bin/cython", "bin/", "/abs", "a b"):
        with pytest.raises(ConfigError):
            _native_python([bad], tmp_path)


def test_the_native_side_answers_the_target_s_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """What _dispatch hands over (the target's machine) is what os.uname() and platform say in
    the native generator's process, and the variable is gone for its children."""
    import os
    import platform
    import sys

    module = _module()
    monkeypatch.setattr(os, "uname", os.uname)  # restored after the test
    monkeypatch.setattr(platform, "_uname_cache", None)
    monkeypatch.setattr(sys, "path_hooks", list(sys.path_hooks))
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)  # not a build environment: no twins
    # sitecustomize imports dockerarch_native_backend first; the generator side uses it
    backend_path = paths.data_path("toolchain") / "dockerarch_native_backend.py"
    spec = importlib.util.spec_from_file_location("dockerarch_native_backend", backend_path)
    assert spec is not None and spec.loader is not None
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    monkeypatch.setitem(sys.modules, "dockerarch_native_backend", backend)
    monkeypatch.setenv(module.TARGET, "armv7l /usr/bin/python3.11")
    monkeypatch.setenv(module.RUNNING, "bin/cython")
    monkeypatch.delenv("DOCKERARCH_DRIVERS_LOG", raising=False)
    module._as_target()
    assert os.uname().machine == "armv7l" and platform.machine() == "armv7l"
    assert module.TARGET not in os.environ
    monkeypatch.setattr(platform, "_uname_cache", None)
