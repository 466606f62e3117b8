"""The native PEP 517 backend's decisions (data/toolchain/dockerarch_native_backend.py): which
command lines are uv's hook calls, and when the native interpreter must hand a hook back to the
emulated one; what the build's report says of it; and which builds ask for it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

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
    # an object path: uv imports it `from setuptools.build_meta import __legacy__ as backend`
    # (a pyproject.toml without build-backend, zstandard 0.23.0's)
    legacy = SCRIPT.replace("import setuptools.build_meta as backend",
                            "from setuptools.build_meta import __legacy__ as backend")  # fmt: skip
    assert hook([argv[0], "-c", legacy], UV_ENV, ENV, "/usr") == "setuptools.build_meta:__legacy__"
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


AARCH64 = ".cpython-311-aarch64-linux-gnu.so"
X86_64 = ".cpython-311-x86_64-linux-gnu.so"


def _x86_64() -> bytes:
    x86 = bytearray(shared_object("aarch64"))
    x86[18:20] = (62).to_bytes(2, "little")  # EM_X86_64
    return bytes(x86)


def _dist(site: Path, name: str, version: str, files: list[str]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nabout\n"
    )
    (info / "RECORD").write_text(
        "".join(f"{f},sha256=x,1\n" for f in files) + f"{info.name}/RECORD,,\n"
    )


def test_the_targets_extension_modules_need_x86_64_twins_beside_them(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "setuptools").mkdir(parents=True)
    (site / "setuptools" / "__init__.py").write_text("")
    # the retagged x86-64 driver wheels (cmake, ninja) bring x86-64 programs: not modules
    (site / "cmake" / "data" / "bin").mkdir(parents=True)
    (site / "cmake" / "data" / "bin" / "cmake").write_bytes(_x86_64())
    (site / "_x86helper.so").write_bytes(_x86_64())
    (site / "notelf.so").write_text("a linker script, not ELF")
    assert BACKEND.without_twins(str(site), X86_64) == []
    numpy = site / "numpy" / "_core"
    numpy.mkdir(parents=True)
    (numpy / f"_multiarray_umath{AARCH64}").write_bytes(shared_object())
    # numpy's vendored libraries (numpy.libs, hashed names) come with the twin wheel: not needed
    (site / "numpy.libs").mkdir()
    (site / "numpy.libs" / "libscipy_openblas64_-ff651d7f.so").write_bytes(shared_object())
    (site / "libfoo.so.1").write_bytes(shared_object())
    module = f"numpy/_core/_multiarray_umath{AARCH64}"
    assert BACKEND.without_twins(str(site), X86_64) == [module]
    assert BACKEND.stranded(str(site), [module]) == [module]  # no Python source to fall back on
    (numpy / f"_multiarray_umath{X86_64}").write_bytes(_x86_64())
    assert BACKEND.without_twins(str(site), X86_64) == []
    # abi3 and untagged modules: the native interpreter takes their suffix too; Cython ships
    # Utils.py beside Utils.abi3.so, its own source, which the native side loads instead
    cython = site / "Cython"
    cython.mkdir()
    (cython / "Utils.abi3.so").write_bytes(shared_object("armhf"))
    (cython / "Utils.py").write_text("# the module's source")
    (site / "_plain.so").write_bytes(shared_object())
    left = BACKEND.without_twins(str(site), X86_64)
    assert sorted(left) == ["Cython/Utils.abi3.so", "_plain.so"]
    assert BACKEND.stranded(str(site), left) == ["_plain.so"]
    (cython / f"Utils{X86_64}").write_bytes(_x86_64())  # a tagged twin: found first natively
    assert BACKEND.without_twins(str(site), X86_64) == ["_plain.so"]


def test_each_module_is_traced_to_the_distribution_whose_twin_is_fetched(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    backend_so, numpy_so = f"_cffi_backend{AARCH64}", f"numpy/_core/_multiarray_umath{AARCH64}"
    _dist(site, "cffi", "1.17.1", ["cffi/__init__.py", backend_so])
    _dist(
        site,
        "numpy",
        "2.1.3",
        ["numpy/__init__.py", numpy_so, f"numpy/linalg/_umath_linalg{AARCH64}"],
    )
    found = BACKEND.owners(
        str(site), [backend_so, numpy_so, f"numpy/linalg/_umath_linalg{AARCH64}", "stray.so"]
    )
    assert found == {
        ("cffi", "1.17.1"): [backend_so],
        ("numpy", "2.1.3"): [numpy_so, f"numpy/linalg/_umath_linalg{AARCH64}"],
        ("", ""): ["stray.so"],
    }


def test_only_the_twin_wheels_compiled_files_that_are_not_there_are_copied(tmp_path: Path) -> None:
    site, unpacked = tmp_path / "site", tmp_path / "unpacked"
    for top in (site, unpacked):
        (top / "cffi").mkdir(parents=True)
        (top / "cffi" / "__init__.py").write_text("# the same pure Python")
    (site / f"_cffi_backend{AARCH64}").write_bytes(shared_object())
    (site / "cffi.libs").mkdir()
    (site / "cffi.libs" / "libffi-aaaa.so.8").write_bytes(shared_object())
    (unpacked / f"_cffi_backend{X86_64}").write_bytes(_x86_64())
    (unpacked / "cffi.libs").mkdir()
    (unpacked / "cffi.libs" / "libffi-bbbb.so.8").write_bytes(_x86_64())
    (unpacked / "cffi" / "_notes.so").write_text("not ELF: not copied")
    assert BACKEND.twin_files(str(unpacked), str(site)) == [
        f"_cffi_backend{X86_64}",
        "cffi.libs/libffi-bbbb.so.8",
    ]
    (site / f"_cffi_backend{X86_64}").write_bytes(_x86_64())
    assert BACKEND.twin_files(str(unpacked), str(site)) == ["cffi.libs/libffi-bbbb.so.8"]


def test_a_module_left_with_neither_twin_nor_source_keeps_the_backend_emulated(
    tmp_path: Path,
) -> None:
    (tmp_path / f"stray{AARCH64}").write_bytes(shared_object())  # in no RECORD: no wheel to ask for
    why = BACKEND.twins([str(tmp_path)])
    assert why is not None and f"stray{AARCH64}" in why and "no distribution" in why
    (tmp_path / "stray.py").write_text("# its source: the native side loads this instead")
    assert BACKEND.twins([str(tmp_path)]) is None


def test_a_32_bit_target_is_refused_by_the_x86_64_interpreter() -> None:
    # (armv7's backends run in the i386 interpreter, collect-python32, whose sizes are armhf's)
    armv7 = {"maxsize": 2**31 - 1, "byteorder": "little"}
    assert "not 64-bit little-endian as the x86-64 one is" in BACKEND.refusal(armv7)
    big = {"maxsize": sys.maxsize, "byteorder": "big"}
    assert BACKEND.refusal(big) is not None
    assert BACKEND.refusal({"maxsize": sys.maxsize, "byteorder": sys.byteorder}) is None


def test_the_report_says_where_each_backend_ran() -> None:
    report = accel.DriverReport.parse(
        "native python3.11-minimal 3.11.2-6 python-native\n"
        "native-backend setuptools.build_meta\nnative-backend setuptools.build_meta\n"
        "native-backend scikit_build_core.build\n"
        "emulated-backend mesonpy the build environment has a compiled module for the target "
        "(numpy/_core/_x.so)\nnative-query python3.11\nnative-twin cffi 1.17.1\n"
        "pure-python Cython 3.0.12 no x86-64 wheel of Cython 3.0.12 (not found)\n"
    )
    assert report.backends == {"setuptools.build_meta": 2, "scikit_build_core.build": 1}
    assert report.emulated_backends == {
        "mesonpy": "the build environment has a compiled module for the target (numpy/_core/_x.so)"
    }
    assert report.as_dict()["native_backends"] == report.backends
    assert report.lines()[1:] == [
        "native PEP 517 backend: setuptools.build_meta (2 hook calls), scikit_build_core.build (1 hook call)",
        "x86-64 compiled twins of build requirements: cffi 1.17.1",
        "Cython 3.0.12 runs natively from its pure-Python modules (slower): no x86-64 wheel of "
        "Cython 3.0.12 (not found)",
        "PEP 517 backend mesonpy ran emulated: the build environment has a compiled module for "
        "the target (numpy/_core/_x.so)",
        "uv's interpreter query answered natively as the target: python3.11 (1x)",
    ]
    assert report.as_dict()["native_queries"] == {"python3.11": 1}
    assert report.as_dict()["native_twins"] == {"cffi": "1.17.1"}
    assert report.as_dict()["pure_python"] == {
        "Cython 3.0.12": "no x86-64 wheel of Cython 3.0.12 (not found)"
    }


def test_an_armv7_build_s_report_names_the_twins_of_its_i386_backend() -> None:
    report = accel.DriverReport.parse(
        "native python3.11-minimal 3.11.2-6 python-native\n"
        "native python3.11-minimal-i386 3.11.2-6 python-native32\n"
        "native-backend setuptools.build_meta\nnative-twin cffi 2.1.1 i686\n"
        "native-python bin/cython\nnative-twin Cython 3.0.12\n"
    )
    assert report.as_dict()["native_twins_i686"] == {"cffi": "2.1.1"}
    assert report.as_dict()["native_twins"] == {"Cython": "3.0.12"}  # the code generator's
    assert report.native["python3.11-minimal-i386"] == "3.11.2-6"
    assert "i686 compiled twins of build requirements: cffi 2.1.1" in report.lines()
    assert "x86-64 compiled twins of build requirements: Cython 3.0.12" in report.lines()


def test_a_pure_code_generator_is_sought_compiled_once(tmp_path: Path) -> None:
    """Cython installed from its pure wheel (armv7) is a speed-up to seek; a compiled one (its
    modules in RECORD), another pure distribution, or one already sought is not."""
    site = tmp_path / "site"
    _dist(site, "Cython", "3.0.12", ["Cython/__init__.py", "Cython/Compiler/Scanning.py"])
    _dist(site, "setuptools", "80.0.0", ["setuptools/__init__.py"])
    (info,) = site.glob("Cython-*.dist-info")
    assert BACKEND.pure_speedups(str(site)) == [("Cython", "3.0.12", str(info))]
    (info / BACKEND._MARK).write_text("twins copied\n")
    assert BACKEND.pure_speedups(str(site)) == []
    other = tmp_path / "other"
    _dist(other, "cython", "3.3.1", ["Cython/__init__.py", f"Cython/Compiler/Scanning{AARCH64}"])
    assert BACKEND.pure_speedups(str(other)) == []  # compiled for the target: a twin instead
    assert BACKEND.SPEEDUPS == accel.NATIVE_SPEEDUPS  # the set gives what the stage seeks


def test_only_modules_compiled_from_the_installed_sources_are_taken(tmp_path: Path) -> None:
    """The x86-64 wheel's compiled modules are taken beside their own, byte-identical source;
    not a module whose source is not installed (refnanny), nor any when a source differs."""
    site, unpacked = tmp_path / "site", tmp_path / "unpacked"
    for top in (site, unpacked):
        (top / "Cython" / "Compiler").mkdir(parents=True)
        (top / "Cython" / "Compiler" / "Scanning.py").write_text("# the same source")
        (top / "Cython" / "__init__.py").write_text("")
    (unpacked / "Cython" / "Compiler" / f"Scanning{X86_64}").write_bytes(_x86_64())
    (unpacked / "Cython" / "Runtime").mkdir()
    (unpacked / "Cython" / "Runtime" / f"refnanny{X86_64}").write_bytes(_x86_64())
    (unpacked / "Cython.libs").mkdir()
    (unpacked / "Cython.libs" / "libgcc-abcd.so.1").write_bytes(_x86_64())
    taken, why = BACKEND.compiled_from_source(str(unpacked), str(site))
    assert why is None
    assert taken == [f"Cython/Compiler/Scanning{X86_64}", "Cython.libs/libgcc-abcd.so.1"]
    (unpacked / "Cython" / "__init__.py").write_text("__version__ = 'another'")
    taken, why = BACKEND.compiled_from_source(str(unpacked), str(site))
    assert taken == [] and why is not None and "Cython/__init__.py" in why


def test_hybrid_builds_ask_for_it_armv7_s_in_the_i386_interpreter() -> None:
    recipes, targets = load_recipes(), load_targets()
    base = accel.toolchain_base(targets["debian-aarch64"], targets)

    def toolchain(target: str, requested: str = "hybrid") -> accel.Toolchain | None:
        return accel.decide(targets[target], recipes["wheel"], requested=requested,
                            route_accel="qemu", toolchain_base=base,
                            cross_available=lambda p, s: True).toolchain  # fmt: skip

    aarch64, armv7 = toolchain("debian-aarch64"), toolchain("debian-armv7")
    assert aarch64 is not None and aarch64.native_backend and not aarch64.python32
    assert "python3.11-minimal" in aarch64.use_drivers  # the interpreter is put in place
    assert armv7 is not None and armv7.native_backend and armv7.python32
    # the x86-64 one is still put in place, for Cython (a code generator) and byte-compiling
    assert "python3.11-minimal" in armv7.use_drivers and "bin/cython" in armv7.native_python
    compilers = toolchain("debian-armv7", "compilers")
    assert compilers is not None and not compilers.native_backend and not compilers.python32


def test_the_i386_interpreter_is_collected_for_32_bit_targets_only() -> None:
    from dockerarch.render import for_generate, plan, render

    stages = {}
    for arch in ("armv7", "aarch64"):
        (request,) = plan("wheel", arch=arch, target=None, version=None, package="zstandard",
                          settings={})  # fmt: skip
        stages[arch] = render(for_generate(request, "hybrid"), paths.template_dirs())
    assert " AS native-python32-stage\n" in stages["armv7"]
    assert "python3.11-minimal:i386 libpython3.11-stdlib:i386" in stages["armv7"]
    assert "COPY --from=native-python32-stage /python32/ " in stages["armv7"]
    assert "native-python32-stage" not in stages["aarch64"]
    # the stage is part of what the toolchain image is made from: its key changes with it
    key = accel.toolchain_key(stages["armv7"], Path("/nonexistent"), "sha256:1")
    other = stages["armv7"].replace("libpython3.11-stdlib:i386", "libpython3.11-stdlib:i386 x")
    assert accel.toolchain_key(other, Path("/nonexistent"), "sha256:1") != key


def test_the_native_side_passes_over_a_foreign_module_for_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cython's armv7 wheel has Utils.abi3.so (a suffix this interpreter takes too) beside
    Utils.py: natively, the source is imported, not the ARM file (which would fail to load)."""
    import importlib

    (tmp_path / "dockerarch_probe_utils.abi3.so").write_bytes(shared_object("armhf"))
    (tmp_path / "dockerarch_probe_utils.py").write_text("FROM = 'source'\n")
    monkeypatch.setattr(sys, "path_hooks", list(sys.path_hooks))
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "dockerarch_probe_utils", raising=False)
    with pytest.raises(ImportError):  # as the interpreter finds it by itself
        importlib.import_module("dockerarch_probe_utils")
    BACKEND.skip_foreign_modules()
    assert importlib.import_module("dockerarch_probe_utils").FROM == "source"
    monkeypatch.delitem(sys.modules, "dockerarch_probe_utils", raising=False)
