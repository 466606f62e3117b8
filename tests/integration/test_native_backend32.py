"""The native PEP 517 backend of hybrid builds for armv7: its backends run in the i386 interpreter
(collect-python32), whose pointers, sys.maxsize and byte order are armhf's. The same packages as
test_native_backend's aarch64 proof (a setuptools, a scikit-build-core, a meson-python package
and one whose build imports cffi, which then gets its i686 twin), written there, each built
twice for armv7: the backend native (the default) and emulated (--set BACKEND=emulated), without
the runtime image (--no-smoke: what is compared is the wheel). Nothing may change but time: the
wheel's tag, its file list, every shared object's dynamic symbols and section sizes, every other
file byte for byte (what the build asked its Python: armv7l, the 4-byte pointer, armhf's
extension suffix; cffi's generated C)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from .conftest import dockerarch, dockerarch_each
from .shapes import elf_shape
from .test_native_backend import PACKAGES, _wheel

pytestmark = pytest.mark.integration

KINDS = ("setuptools", "scikit-build-core", "meson-python", "cffi")
ROUTES = ("native", "emulated")
SUFFIX = ".cpython-311-arm-linux-gnueabihf.so"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Each package's armv7 result directory, by (backend kind, route); the command's progress
    in its progress.txt."""
    done = dockerarch("base", "bootstrap", "--arch", "armv7", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr
    builds = []
    for kind in KINDS:
        src = tmp_path_factory.mktemp(f"{kind.replace('-', '')}32")
        for name, text in PACKAGES[kind].items():
            (src / name).write_text(text)
        for route in ROUTES:
            builds.append(
                (kind, route, src, tmp_path_factory.mktemp(f"{kind}-{route}-32".replace("-", "")))
            )
    runs = dockerarch_each([("build", "wheel", "--package", str(src), "--arch", "armv7", "--set",
                             f"BACKEND={route}", "--no-smoke", "--out", str(out))
                            for _, route, src, out in builds])  # fmt: skip
    results: dict[tuple[str, str], Path] = {}
    for (kind, route, _, out), done in zip(builds, runs, strict=True):
        assert done.returncode == 0, done.stderr[-3000:]
        (result,) = (out / "debian-armv7").glob("dockerarch_backend_*-1.0")
        (out / "progress.txt").write_text(done.stderr)
        results[kind, route] = result
    return results


@pytest.mark.parametrize("kind", KINDS)
def test_the_i386_backend_changes_nothing_but_time(
    kind: str, built: dict[tuple[str, str], Path]
) -> None:
    native, emulated = (_wheel(built[kind, route]) for route in ROUTES)
    assert native.name == emulated.name and native.name.endswith("-cp311-cp311-linux_armv7l.whl")
    with zipfile.ZipFile(native) as n, zipfile.ZipFile(emulated) as e:
        names = sorted(n.namelist())
        assert names == sorted(e.namelist())
        shared = [x for x in names if x.endswith(".so")]
        assert shared and all(x.endswith(SUFFIX) for x in shared)
        for name in shared:
            assert elf_shape(n.read(name)) == elf_shape(e.read(name)), name
        others = [x for x in names if not x.endswith((".so", "/", "/RECORD"))]
        for name in others:
            assert n.read(name) == e.read(name), name
    drivers = {r: json.loads((built[kind, r] / "manifest.json").read_text())["drivers"]
               for r in ROUTES}  # fmt: skip
    # the hooks ran in the i386 interpreter, which the build stage had in place
    assert sum(drivers["native"]["native_backends"].values()) >= 2  # get_requires + build_wheel
    assert not drivers["native"]["emulated_backends"]
    assert drivers["native"]["native"]["python3.11-minimal-i386"]
    assert not drivers["emulated"]["native_backends"]
    # cffi's compiled module: its i686 twin, the version the target's is; nothing of it shipped
    assert list(drivers["native"]["native_twins_i686"]) == (["cffi"] if kind == "cffi" else [])
    if kind == "cffi":
        with zipfile.ZipFile(native) as n:
            record = n.read(next(x for x in n.namelist() if x.endswith("/RECORD"))).decode()
        assert "i386" not in record and "x86_64" not in record
        said = (built[kind, "native"].parents[1] / "progress.txt").read_text()
        assert "i686 compiled twins of build requirements: cffi" in said


def test_setuptools_asked_the_target_s_questions_in_the_i386_interpreter(
    built: dict[tuple[str, str], Path],
) -> None:
    with zipfile.ZipFile(_wheel(built["setuptools", "native"])) as wheel:
        asked = json.loads(wheel.read("st_probe/asked.json"))
    assert asked["machine"] == asked["uname"] == "armv7l"
    assert asked["platform"] == "linux-armv7l" and asked["multiarch"] == "arm-linux-gnueabihf"
    assert asked["ext_suffix"] == SUFFIX == asked["suffixes"][0]
    assert asked["cc"].startswith("arm-linux-gnueabihf-gcc")
    assert asked["pointer"] == 4 and asked["maxsize"] == 2**31 - 1
