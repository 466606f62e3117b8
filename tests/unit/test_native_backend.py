"""The native PEP 517 backend's decisions (data/toolchain/dockerarch_native_backend.py): which
command lines are uv's hook calls, and when the native interpreter must hand a hook back to the
emulated one; what the build's report says of it; and which builds ask for it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from dockerarch import accel, paths
from dockerarch.recipes import load_recipes
from dockerarch.targets import load_targets

from .elfbytes import shared_object


def _module() -> ModuleType:
    path = paths.data_path("toolchain") / "dockerarch_native_backend.py"
    spec = importlib.util.spec_from_file_location("dockerarch_native_backend", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # inert here: no DOCKERARCH_BACKEND_TARGET in the environment
    return module


BACKEND = _module()
ENV = "/root/.cache/uv/builds-v0/.tmpAbC123"
# The script uv 0.13 runs for the build_wheel hook (crates/uv-build-frontend), as seen in a build.
SCRIPT = f"""\
import sys

if sys.path[0] == "":
    sys.path.pop(0)

sys.path = [] + sys.path

import setuptools.build_meta as backend


wheel_filename = backend.build_wheel(__import__("os").fsdecode(b"/out"), {{}}, None)
with open(__import__("os").fsdecode(b"{ENV}/build_wheel.txt"), "w") as fp:
    fp.write(wheel_filename)
"""
UV_ENV = {"VIRTUAL_ENV": ENV, "UV_INTERNAL__BUILD_DIR": "/src/pkg"}


def test_uv_hook_calls_are_recognised_and_nothing_else() -> None:
    hook = BACKEND.hook_backend
    argv = [f"{ENV}/bin/python", "-c", SCRIPT]
    assert hook(argv, UV_ENV, ENV, "/usr") == "setuptools.build_meta"
    in_tree = SCRIPT.replace("setuptools.build_meta", "backend_pkg._build")
    assert hook([argv[0], "-c", in_tree], UV_ENV, ENV, "/usr") == "backend_pkg._build"
    # not uv's build environment, not its hook, or not in the environment uv named
    assert hook(argv, {"VIRTUAL_ENV": ENV}, ENV, "/usr") is None
    assert hook(argv, UV_ENV, "/usr", "/usr") is None
    assert hook(argv, {**UV_ENV, "VIRTUAL_ENV": "/elsewhere"}, ENV, "/usr") is None
    assert (
        hook([argv[0], "-c", "import setuptools; setuptools.setup()"], UV_ENV, ENV, "/usr") is None
    )
    assert hook([argv[0], "setup.py", "build_ext"], UV_ENV, ENV, "/usr") is None
    assert hook([argv[0], "-c", SCRIPT, "extra"], UV_ENV, ENV, "/usr") is None


def test_uv_interpreter_queries_are_recognised() -> None:
    query = BACKEND.interpreter_query
    script = ('import sys; sys.path = [__import__("os").fsdecode(b"/root/.cache/uv/.tmpKzSPZC")]'
              " + sys.path; from python.get_interpreter_info import main; main()")  # fmt: skip
    argv = ["/usr/bin/python3.11", "-I", "-B", "-c", script]
    assert query(argv, "/usr", "/usr")
    assert not query(argv, ENV, "/usr")  # asked of a virtual environment: left alone
    assert not query(["/usr/bin/python3.11", "-c", script], "/usr", "/usr")
    assert not query([*argv[:4], "import sys; print(sys.path)"], "/usr", "/usr")


def test_compiled_modules_for_the_target_send_the_backend_back(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "setuptools").mkdir(parents=True)
    (site / "setuptools" / "__init__.py").write_text("")
    # the retagged x86-64 driver wheels (cmake, ninja) bring x86-64 programs: not modules
    (site / "cmake" / "data" / "bin").mkdir(parents=True)
    x86 = bytearray(shared_object("aarch64"))
    x86[18:20] = (62).to_bytes(2, "little")  # EM_X86_64
    (site / "cmake" / "data" / "bin" / "cmake").write_bytes(bytes(x86))
    (site / "_x86helper.so").write_bytes(bytes(x86))
    (site / "notelf.so").write_text("a linker script, not ELF")
    target = {"maxsize": sys.maxsize, "byteorder": sys.byteorder}
    assert BACKEND.foreign_module([str(site)]) is None
    assert BACKEND.refusal(target, [str(site)]) is None
    numpy = site / "numpy" / "_core"
    numpy.mkdir(parents=True)
    (numpy / "_multiarray_umath.cpython-311-aarch64-linux-gnu.so").write_bytes(shared_object())
    module = "numpy/_core/_multiarray_umath.cpython-311-aarch64-linux-gnu.so"
    assert BACKEND.foreign_module([str(site)]) == module
    assert BACKEND.refusal(target, [str(site)]) == (
        f"the build environment has a compiled module for the target ({module})"
    )
    (numpy / "_multiarray_umath.cpython-311-aarch64-linux-gnu.so").unlink()
    (site / "libfoo.so.1").write_bytes(shared_object("armhf"))  # a versioned library name
    assert BACKEND.foreign_module([str(site)]) == "libfoo.so.1"


def test_a_32_bit_target_keeps_its_backend_emulated(tmp_path: Path) -> None:
    armv7 = {"maxsize": 2**31 - 1, "byteorder": "little"}
    assert "64-bit" in BACKEND.refusal(armv7, [str(tmp_path)])
    big = {"maxsize": sys.maxsize, "byteorder": "big"}
    assert BACKEND.refusal(big, [str(tmp_path)]) is not None


def test_the_report_says_where_each_backend_ran() -> None:
    report = accel.DriverReport.parse(
        "native python3.11-minimal 3.11.2-6 python-native\n"
        "native-backend setuptools.build_meta\nnative-backend setuptools.build_meta\n"
        "native-backend scikit_build_core.build\n"
        "emulated-backend mesonpy the build environment has a compiled module for the target "
        "(numpy/_core/_x.so)\nnative-query python3.11\n"
    )
    assert report.backends == {"setuptools.build_meta": 2, "scikit_build_core.build": 1}
    assert report.emulated_backends == {
        "mesonpy": "the build environment has a compiled module for the target (numpy/_core/_x.so)"
    }
    assert report.as_dict()["native_backends"] == report.backends
    assert report.lines()[1:] == [
        "native PEP 517 backend: setuptools.build_meta (2 hook calls), scikit_build_core.build (1 hook call)",
        "PEP 517 backend mesonpy ran emulated: the build environment has a compiled module for "
        "the target (numpy/_core/_x.so)",
        "uv's interpreter query answered natively as the target: python3.11 (1x)",
    ]
    assert report.as_dict()["native_queries"] == {"python3.11": 1}


def test_hybrid_aarch64_builds_ask_for_it_and_armv7_builds_do_not() -> None:
    recipes, targets = load_recipes(), load_targets()
    base = accel.toolchain_base(targets["debian-aarch64"], targets)

    def toolchain(target: str, requested: str = "hybrid") -> accel.Toolchain | None:
        return accel.decide(targets[target], recipes["wheel"], requested=requested,
                            route_accel="qemu", toolchain_base=base,
                            cross_available=lambda p, s: True).toolchain  # fmt: skip

    aarch64, armv7 = toolchain("debian-aarch64"), toolchain("debian-armv7")
    assert aarch64 is not None and aarch64.native_backend
    assert aarch64.template_vars()["python_native"]  # the interpreter is collected for it
    assert armv7 is not None and not armv7.native_backend
    assert not armv7.template_vars()["python_native"]
    compilers = toolchain("debian-aarch64", "compilers")
    assert compilers is not None and not compilers.native_backend
