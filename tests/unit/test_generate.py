from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from dockerarch import accel, paths
from dockerarch.recipes import load_recipes
from dockerarch.render import TemplateError, for_generate, plan, render, render_dockerfile
from dockerarch.targets import load_targets
from tests.unit.trees import source_for

from .cli import run

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
UPDATE = os.environ.get("DOCKERARCH_UPDATE_GOLDEN") == "1"

RECIPES = load_recipes()
TARGETS = load_targets()
COMBINATIONS = [
    (r.name, t.name)
    for r in RECIPES.values()
    for t in TARGETS.values()
    if r.supports(t) and t.arch.name != "amd64"
]
# What builds natively on this x86-64 machine: no toolchain stage, no QEMU.
NATIVE = [(r.name, t.name) for r in RECIPES.values() for t in TARGETS.values()
          if r.supports(t) and t.arch.name == "amd64"]  # fmt: skip


def _render(recipe: str, target: str, mode: str = "hybrid", **kw: object) -> str:
    """As `dockerarch generate` renders it (hybrid unless mode='none')."""
    package = "zstandard==0.23.0" if recipe == "wheel" else None
    args: dict = {
        "arch": None,
        "target": target,
        "version": None,
        "package": package,
        "settings": {},
        "source": source_for(RECIPES[recipe]),
    }
    args.update(kw)
    (request,) = plan(recipe, **args)
    return render(for_generate(request, mode), paths.template_dirs())


def _stages(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^FROM (\S+) AS (\S+)$", text, flags=re.MULTILINE)


@pytest.mark.parametrize(("recipe", "target"), COMBINATIONS)
def test_every_recipe_renders_for_every_target(recipe: str, target: str) -> None:
    text = _render(recipe, target, "none")
    board = TARGETS[target]
    stages = _stages(text)
    names = [name for _, name in stages]
    assert names[:3] == ["runtime-base-stage", "runtime-base", "build"]
    assert names[-2:] == ["artifacts", "runtime"]
    assert ("scratch", "artifacts") in stages
    # The runtime packages are installed once: both the build and the runtime start from them,
    # the machine's image of them when dockerarch build names one, else the stage.
    assert {n: i for i, n in stages}["runtime-base-stage"] == board.base_image
    assert {n: i for i, n in stages}["runtime-base"] == "${DOCKERARCH_RUNTIME_BASE}"
    assert "\nARG DOCKERARCH_RUNTIME_BASE=runtime-base-stage\n" in text.split("\nFROM ")[0]
    assert {n: i for i, n in stages}["build"] == "runtime-base"
    assert {n: i for i, n in stages}["runtime"] == "runtime-base"
    assert board.cpu_flags in text
    assert "{{" not in text and "{%" not in text
    assert "ca-bundle" in text  # the host's CA reaches every step that downloads
    assert text == _render(recipe, target, "none")  # same input, same bytes
    assert "toolchain" not in text and "ccache" not in text


@pytest.mark.parametrize(("recipe", "target"), NATIVE)
def test_the_build_hosts_own_arch_renders_a_native_build(recipe: str, target: str) -> None:
    text = _render(recipe, target)  # hybrid asked for: nothing to graft, it is this machine's
    # No graft and no hybrid compiler cache (a recipe may ask for ccache itself: glow)
    assert "toolchain" not in text and "--platform=" not in text
    assert "ccache" not in text or "ccache" in RECIPES[recipe].apt
    assert f"FROM {TARGETS[target].base_image} AS runtime-base-stage\n" in text


def test_every_recipe_but_qpulib_builds_for_amd64() -> None:
    assert sorted({r for r, _ in NATIVE}) == sorted(n for n in RECIPES if n != "qpulib")


@pytest.mark.parametrize(("recipe", "target"), COMBINATIONS)
def test_hybrid_grafts_the_cross_toolchain_into_the_build_stage_only(
    recipe: str, target: str
) -> None:
    text = _render(recipe, target)
    board = TARGETS[target]
    native = TARGETS[board.toolchain]  # the amd64 target of the same suite
    head, build = text.split("FROM runtime-base AS build\n")
    build, rest = build.split("FROM scratch AS artifacts\n")
    artifacts, rest = rest.split("FROM artifacts AS toolchain-log\n")
    log_stage, runtime = rest.split("FROM runtime-base AS runtime\n")
    runtime, needs = runtime.split("# The same check of the libraries on its own")
    # The toolchain stage: amd64, Debian's cross packages for the target's triplet and gcc major.
    assert f"FROM --platform=linux/amd64 {native.base_image} AS native-python-stage\n" in head
    # made on the native Python (an image of its own, its lower layers)
    assert "FROM native-python AS toolchain-stage\n" in head
    assert "FROM native-python AS toolchain-wheels\n" in head
    assert head.index(" AS native-python\n") < head.index(" AS toolchain-wheels\n")
    # ... which dockerarch build takes from the machine's toolchain image (by default built here).
    assert text.startswith("# Generated") and "\nARG DOCKERARCH_TOOLCHAIN=toolchain-stage\n" in head
    assert head.index("ARG DOCKERARCH_TOOLCHAIN=") < head.index("\nFROM ")
    assert "FROM --platform=linux/amd64 ${DOCKERARCH_TOOLCHAIN} AS toolchain\n" in head
    assert "FROM --platform=linux/amd64 ${DOCKERARCH_NATIVE_PYTHON} AS native-python\n" in head
    # The target's package lists are fetched by the x86-64 apt, with the target's own /etc/apt,
    # into the target's lists cache.
    lists = head[head.index("AS package-lists\n") :]
    assert f"FROM --platform=linux/amd64 {native.base_image} AS package-lists" in head
    assert "--mount=type=bind,from=target-base,source=/etc/apt,target=/run/target-apt" in lists
    assert f"id=dockerarch-apt-lists-{board.name},target=/run/target-lists" in lists
    assert f"update-lists {board.debian_arch} /run/target-apt" in lists
    # Every emulated apt step installs with the native apt from those lists (no apt-get update
    # under QEMU) and byte-compiles with the native Python, both mounted only while it runs.
    apt_steps = re.findall(
        r"^RUN (?:.(?!^RUN ))*?(?:apt-get install|apt-install)[^\n]*", head + build, re.M | re.S
    )
    emulated = [s for s in apt_steps if native.name not in s]
    assert emulated and all(
        "--mount=type=bind,from=native-python,target=/run/dockerarch-native" in s
        and "--mount=type=bind,from=package-lists,source=/dockerarch-lists" in s
        and f"id=dockerarch-apt-lists-{board.name},target=/var/lib/apt/lists" in s
        and "with-native-python /run/dockerarch-native \\\n"
        "        sh /run/dockerarch/apt-install /run/dockerarch-native /run/dockerarch-lists"
        in s
        and "apt-get update" not in s
        for s in emulated
    ), emulated
    assert all("apt-get update" in s for s in apt_steps if native.name in s)
    # The amd64 stages' caches are shared by every target: a build that finds them in use gets
    # its own copy (two targets' toolchains install side by side); the target's own are locked.
    for step in apt_steps:
        mounts = re.findall(r"id=dockerarch-apt(?:-lists)?-([\w-]+),target=\S+,sharing=(\w+)", step)
        assert len(mounts) == 2, step
        assert all((name == native.name) == (sharing == "private") for name, sharing in mounts)
    for package in (f"gcc-{board.gcc}-{board.triplet}", f"g++-{board.gcc}-{board.triplet}",
                    f"binutils-{board.triplet}", "ccache"):  # fmt: skip
        assert f"        {package} \\\n" in head or f"        {package}\n" in head
    assert f"collect-toolchain {board.triplet} {board.gcc} {board.debian_arch} /toolchain" in head
    # The build stage installs no ARM compiler, grafts the native one before anything compiles,
    # compiles with ccache and ends with the report of where the compilers ran.
    packages = re.findall(
        r"^ {8}(\S+)", build.split("COPY --from=toolchain", 1)[0], flags=re.MULTILINE
    )
    assert "build-essential" not in packages and "gcc" not in packages and "g++" not in packages
    # What build-essential brought that builds still need.
    assert {"libc6-dev", "make", "patch", "libatomic1"} <= set(packages)
    graft = build.index("COPY --from=toolchain /toolchain/ /")
    assert graft < build.index("mkdir -p /out")
    assert f"CC={board.triplet}-gcc" in build and f"CXX={board.triplet}-g++" in build
    assert f"id=dockerarch-ccache-{board.name}" in build[graft:]
    assert build.rstrip().endswith(
        f"RUN touch {accel.LOG} {accel.CCACHE_LOG} {accel.FARM_LOG} && dockerarch-cc --report"
    )
    assert f"CCACHE_STATSLOG={accel.CCACHE_LOG}" in build
    # Nothing of it in the artifacts or the runtime image.
    assert artifacts.split("\n\n#")[0].strip() == (
        "COPY --from=build /out/ /\n"
        "COPY --from=build /dockerarch-sonames.tsv /.dockerarch-sonames.tsv"
    )
    # The export of a hybrid build: the outputs and, beside them, the compiler-run log and
    # what use-native-drivers did.
    assert log_stage.split("\n\n")[0].strip().splitlines() == [
        f"COPY --from=build {accel.LOG} /{accel.LOG_EXPORT}",
        f"COPY --from=build {accel.CCACHE_LOG} /{accel.CCACHE_EXPORT}",
        f"COPY --from=build {accel.FARM_LOG} /{accel.FARM_EXPORT}",
        f"COPY --from=build {accel.DRIVERS_LOG} /{accel.DRIVERS_EXPORT}",
    ]
    # The build driver: the x86-64 builds of the shell, make (and cmake and ninja where the
    # recipe installs them) are collected, and put in place in the build stage after its packages
    # are installed and before anything is built.
    drivers = accel.native_drivers(RECIPES[recipe])
    assert drivers[:2] == ("dash", "make")
    collect = head[head.index("collect-toolchain") :].split("\n\n")[0]
    for driver in drivers:
        assert f"{driver}={','.join(accel.DRIVERS[driver])}" in collect
    # One step after the graft: the compiler's check, the drivers' swap, the libraries' owners.
    check = build.index("RUN printf 'int main(void) { return 0; }")
    swap = build.index(f" && sh /usr/lib/dockerarch/libexec/use-native-drivers {accel.DRIVERS_LOG}")
    sonames = build.index(" && mkdir -p /out /src /stage")
    assert graft < check < swap < sonames < build.index("\nRUN ", check + 1)
    # The runtime image takes nothing of the cross toolchain; a wheel's installation there
    # byte-compiles with the toolchain image's native interpreter and installs with its uv
    # (pip-install, a toolchain script), mounted for that step only
    assert not re.search(r"COPY --from=toolchain|ccache|dockerarch-cc|x86", runtime)
    assert re.findall(r"\S*from=toolchain\S*", runtime) == [
        "--mount=type=bind,from=toolchain,target=/run/dockerarch-native"
    ]
    # The libraries check reads the runtime image natively after its packages, in the same step
    # (its report to the log), when dockerarch build names the files (the context needs-files, in
    # place of an empty stage); it writes nothing there.
    assert "\nFROM scratch AS needs-files\n\nFROM runtime-base AS runtime" in text
    last = runtime[runtime.rindex("\nRUN ") :]
    assert "--mount=type=bind,from=needs-files,target=/run/dockerarch-needs" in last
    assert last.rstrip().endswith(
        " && { [ ! -s /run/dockerarch-needs/files.json ] \\\n        || sh /run/dockerarch/native-needs"
        " /run/dockerarch-native /run/dockerarch-needs/files.json; }"
    ), last
    # The same check in stages nothing is loaded from, for a runtime step that came from the
    # cache: only its report is exported.
    assert "native-needs /run/dockerarch-native" in needs and "--network=none" in needs
    assert "FROM scratch AS needs\nCOPY --from=needs-check /dockerarch-needs.txt /\n" in needs
    # and `docker build` of the file without --target still makes the runtime image
    assert needs.rstrip().endswith("FROM runtime AS runtime-image")
    if "wheel" in RECIPES[recipe].artifacts:
        assert "--mount=type=bind,from=toolchain,target=/run/dockerarch-native" in runtime
        assert "sh /run/dockerarch/pip-install /run/dockerarch-native --no-cache-dir" in runtime
        plain = _render(recipe, target, "none")  # no native stage to compile with
        assert "pip-install" not in plain and "python3 -m pip install --no-cache-dir" in plain
    assert text == _render(recipe, target)  # same input, same bytes


def test_opencvs_sdist_is_fetched_unpacked_and_patched_natively_and_built_with_uv() -> None:
    hybrid = _render("opencv", "debian-armv7", settings={"CONTRIB": "1", "HEADLESS": "0"})
    head, build = hybrid.split("FROM runtime-base AS build\n")
    sources = head[head.index("FROM toolchain AS sources") :]
    spec, tree = "opencv-contrib-python==4.10.0.84", "/sdists/opencv-contrib-python-tree"
    assert f"fetch-sdist '{spec}' /sdists/opencv-contrib-python\n" in sources
    assert (
        f"tar -xzf /sdists/opencv-contrib-python/*.tar.gz -C {tree} --strip-components=1" in sources
    )
    step = build[build.index("RUN --mount=type=bind,from=sources") :].split("\nRUN ")[0]
    assert f"source={tree},target=/src/opencv,rw" in step
    assert step.endswith("uv build --wheel --no-create-gitignore --out-dir /out /src/opencv")
    # The patch: upstream's line (opencv-python 4.10.0.84 setup.py) becomes valid Python that
    # lets the typing stubs be missing as it lets G-API's be.
    old, new = re.search(r"sed -i 's\|(.+?)\|(.+?)\|' ", sources).groups()  # type: ignore[union-attr]
    upstream = 'if not found and "gapi" not in relpath_re:\n    raise Exception("Not found")\n'
    patched = upstream.replace(old, new)
    assert patched != upstream
    for relpath_re, raises in (("python/cv2/py.typed", False), ("python/cv2/typing/.*\\.py", False),
                               ("python/cv2/gapi/.*\\.py", False), ("python/cv2/__init__.py", True)):  # fmt: skip
        try:
            exec(patched, {"found": False, "relpath_re": relpath_re})
        except Exception:
            assert raises, relpath_re
        else:
            assert not raises, relpath_re
    plain = _render("opencv", "debian-armv7", "none")
    assert "sources" not in plain and "uv " not in plain
    assert "pip download --no-deps --no-binary opencv-python-headless --dest /src/sdist" in plain
    assert new in plain and plain.count("pip wheel -v --no-deps --wheel-dir /out /src/opencv") == 1


@pytest.mark.parametrize(
    ("recipe", "kw", "dist", "spec", "settings"),
    [
        ("wheel", {}, "zstandard", "zstandard==0.23.0", []),
        ("numpy", {}, "numpy", "numpy==1.26.4", ["setup-args=-Dblas=openblas", "setup-args=-Dlapack=openblas"]),
        ("numpy", {"settings": {"BLAS": "none"}}, "numpy", "numpy==1.26.4", ["setup-args=-Dallow-noblas=true"]),
    ],
)  # fmt: skip
def test_pypi_sdists_are_fetched_natively_and_built_with_uv_in_hybrid_builds(
    recipe: str, kw: dict, dist: str, spec: str, settings: list[str]
) -> None:
    hybrid = _render(recipe, "debian-armv7", **kw)
    head, build = hybrid.split("FROM runtime-base AS build\n")
    # uv from PyPI into the amd64 stage (collect-toolchain grafts it), the sdist fetched there.
    assert f"--target /opt/dockerarch-uv 'uv=={accel.UV_VERSION}'" in head
    assert "FROM toolchain AS sources\n" in head
    # unpacked there too, and built at a path of a fixed name (it is in the debug information)
    assert f"python3 /dockerarch/fetch-sdist '{spec}' /sdists/{dist} /sdists/{dist}/src\n" in head
    step = build[build.index("RUN --mount=type=bind,from=sources") :].split("\nRUN ")[0]
    assert f"from=sources,source=/sdists/{dist}/src,target=/src/{dist},rw" in step
    assert "uv build --wheel --no-create-gitignore --out-dir /out" in step and step.endswith(
        f" /src/{dist}"
    )
    assert re.findall(r"--config-setting=(\S+)", step) == settings
    assert "id=dockerarch-uv-debian-armv7" in step and "id=dockerarch-ccache-debian-armv7" in step
    assert "ca-bundle" in step and "pip wheel" not in hybrid
    plain = _render(recipe, "debian-armv7", "none", **kw)
    assert "sources" not in plain and "uv" not in plain
    assert f"python3 -m pip wheel -v --no-deps --no-binary {dist} --wheel-dir /out" in plain
    assert re.findall(r"--config-settings=(\S+)", plain) == settings
    assert plain.rstrip().split("\n\nFROM scratch AS artifacts")[0].count(f"'{spec}'") == 1


def test_a_local_tree_is_built_with_uv_in_hybrid_builds() -> None:
    fixture = str(Path(__file__).resolve().parents[1] / "fixtures" / "cext")
    hybrid = _render("wheel", "debian-aarch64", package=fixture)
    assert "AS sources" not in hybrid and "fetch-sdist" not in hybrid
    assert "uv build --wheel --no-create-gitignore --out-dir /out /src/package" in hybrid
    plain = _render("wheel", "debian-aarch64", "none", package=fixture)
    assert (
        "python3 -m pip wheel -v --no-deps --wheel-dir /out /src/package" in plain
        and "uv" not in plain
    )


def _build_stage_words(text: str) -> set[str]:
    """The words of the build stage's continued lines (its apt step lists one package a line)."""
    build = text.split(" AS build\n", 1)[1].split("\nFROM ", 1)[0]
    return {line.strip().removesuffix("\\").strip() for line in build.splitlines()
            if line.startswith("        ")}  # fmt: skip


def test_a_tree_that_declares_fortran_gets_gfortran_where_no_cross_gfortran_is_grafted(
    tmp_path: Path,
) -> None:
    """A native amd64 build and a plain-QEMU one install gfortran for a meson package asking
    for Fortran (scipy: 'Unknown compiler(s)' without it); a hybrid build grafts the cross
    gfortran instead and installs no ARM compiler."""
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["meson-python"]\nbuild-backend = "mesonpy"\n\n'
        '[project]\nname = "fortran-ext"\nversion = "1.0"\n'
    )
    (tmp_path / "meson.build").write_text("project('fortran-ext', 'c')\nadd_languages('fortran')\n")
    package = str(tmp_path)
    native = _build_stage_words(_render("wheel", "debian-amd64", package=package))
    plain = _build_stage_words(_render("wheel", "debian-armv7", "none", package=package))
    assert "gfortran" in native and "gfortran" in plain
    hybrid = _render("wheel", "debian-armv7", package=package)
    assert "gfortran" not in _build_stage_words(hybrid) and "python3-dev" in _build_stage_words(
        hybrid
    )
    assert "gfortran-12-arm-linux-gnueabihf" in hybrid  # the toolchain stage's
    c_only = _render("wheel", "debian-armv7", "none", package=str(GOLDEN.parent / "cext"))
    assert "gfortran" not in c_only


@pytest.mark.parametrize(("recipe", "target"), COMBINATIONS)
def test_uv_is_pointed_only_at_wheels_the_build_fetches(recipe: str, target: str) -> None:
    """uv refuses to build at all when its --find-links directory is missing (a wheel recipe
    without cmake once failed so): the directory is named only where native-wheels fills it,
    and only to builds whose recipe drives with cmake or ninja (the toolchain carries their wheels
    for every recipe of the target)."""
    text = _render(recipe, target)
    if "UV_FIND_LINKS=" in text:
        assert "python3 /dockerarch/native-wheels" in text
    drives = {"cmake", "ninja-build"} & set(RECIPES[recipe].apt)
    assert ("UV_FIND_LINKS=" in text) == bool(drives and "native-wheels" in text)


def test_every_required_combination_is_covered() -> None:
    covered = {r for r, _ in COMBINATIONS}
    assert {"wheel", "torch", "torchvision", "opencv", "numpy", "vaccel", "qpulib"} <= covered
    assert {t for _, t in COMBINATIONS} == {n for n, t in TARGETS.items() if t.arch.name != "amd64"}


@pytest.mark.parametrize(
    ("golden", "recipe", "target", "mode"),
    [
        ("wheel-zstandard-debian-armv7", "wheel", "debian-armv7", "none"),
        ("wheel-zstandard-debian-armv7-hybrid", "wheel", "debian-armv7", "hybrid"),
        ("torch-2.6.0-pynq-zu", "torch", "pynq-zu", "none"),
        ("vaccel-0.7.1-pynq-z1", "vaccel", "pynq-z1", "none"),
        ("vaccel-0.7.1-pynq-z1-hybrid", "vaccel", "pynq-z1", "hybrid"),
        ("qpulib-master-rpi3", "qpulib", "rpi3", "none"),
    ],
)
def test_golden(golden: str, recipe: str, target: str, mode: str) -> None:
    path = GOLDEN / f"{golden}.Dockerfile"
    text = _render(recipe, target, mode)
    if UPDATE and (not path.exists() or path.read_text() != text):
        path.write_text(text)
        # a rewrite is never a pass: review the diff, then run the tests without the variable
        pytest.fail(f"{path} rewritten (DOCKERARCH_UPDATE_GOLDEN=1): review it with git diff")
    assert text == path.read_text(), f"{path} differs; DOCKERARCH_UPDATE_GOLDEN=1 rewrites it"


def test_options_and_versions_change_the_output() -> None:
    old = _render("torch", "rpi3", version="1.4.0")
    assert "--branch v1.4.0" in old and "USE_DISTRIBUTED=0" in old
    cuda = _render("torch", "rpi3", settings={"USE_OPENCV": "1"})
    assert "libopencv-dev" in cuda and "USE_OPENCV=1" in cuda
    cmake = _render("vaccel", "rpi3", version="0.5.0")
    assert (
        "cmake -S . -B build" in cmake
        and "meson" not in re.split("apt-get install|apt-install", cmake.split("AS build", 1)[1])[0]
    )
    noblas = _render("numpy", "debian-aarch64", settings={"BLAS": "none"})
    assert "-Dallow-noblas=true" in noblas and "libopenblas-dev" not in noblas
    # the runtime image (and so the smoke test) has the library an OpenBLAS numpy links
    runtime_base = _render("numpy", "debian-aarch64").split(" AS runtime-base-stage\n")[1]
    assert "libopenblas0" in runtime_base.split(" AS runtime-base\n")[0]
    assert "libopenblas0" not in noblas


def test_torch_from_debians_source_package() -> None:
    """SOURCE=debian: the target suite's source package, fetched natively in hybrid builds (the
    emulated stage only copies it) and in the build stage of plain ones; no git clone, and the
    distribution's libraries, since the tree has no third_party/."""
    hybrid = _render("torch", "trixie-armv7")  # Debian 13 targets take Debian's source
    sources, build = hybrid.split("FROM toolchain AS sources", 1)[1].split(" AS build\n", 1)
    assert "apt-get $o source --only-source pytorch;" in sources
    assert "from=target-base,source=/etc/apt,target=/run/target-apt" in sources
    assert "dpkg-dev" in sources and "git clone" not in hybrid
    assert "COPY --from=sources /sources/pytorch /src/pytorch" in build
    assert "USE_SYSTEM_LIBS=ON" in build and "libfmt-dev" in build
    plain = _render("torch", "trixie-armv7", "none", settings={"SOURCE": "debian"})
    build = plain.split(" AS build\n", 1)[1]
    assert "FROM toolchain" not in plain and "git clone" not in plain
    assert "apt-get $o source --only-source pytorch;" in build and "dpkg-dev" in build
    assert "Dir::Etc::trustedparts=/etc/apt/trusted.gpg.d" in build
    # the version asked for is the one checked
    assert 'case "$upstream" in 2.6.0|2.6.0[+~]*)' in _render(
        "torch", "trixie-aarch64", version="2.6.0"
    )
    # a git SOURCE given with --set wins over the target's default
    git = _render("torch", "trixie-armv7", settings={"SOURCE": "https://example.invalid/pytorch"})
    assert "git clone" in git and "source --only-source" not in git


def _built_options(recipe: str, target: str, **kw: object) -> dict[str, str]:
    (request,) = plan(recipe, arch=None, target=target, version=None, package=None,
                      settings=kw.pop("settings", {}), **kw)  # type: ignore[arg-type]  # fmt: skip
    return render_dockerfile(for_generate(request, "hybrid"), paths.template_dirs()).options


def test_the_options_recorded_are_those_built_not_those_given() -> None:
    """manifest.json's options come from the render: Debian's source implies the system's
    libraries, and armhf has no packaged XNNPACK, whatever the recipe's defaults say."""
    debian = _built_options("torch", "trixie-armv7")
    assert (debian["SOURCE"], debian["SYSTEM_LIBS"], debian["USE_XNNPACK"]) == ("debian", "1", "0")
    assert "USE_XNNPACK=1" not in _render("torch", "trixie-armv7")
    arm64 = _built_options("torch", "trixie-aarch64")
    assert (arm64["SYSTEM_LIBS"], arm64["USE_XNNPACK"]) == ("1", "1")
    git = _built_options("torch", "debian-armv7")  # bundled third_party/: as given
    assert (git["SYSTEM_LIBS"], git["USE_XNNPACK"]) == ("0", "1")
    off = _built_options("torch", "debian-aarch64", settings={"USE_XNNPACK": "0"})
    assert off["USE_XNNPACK"] == "0" and "USE_XNNPACK=0" in _render(
        "torch", "debian-aarch64", settings={"USE_XNNPACK": "0"}
    )


def test_a_template_may_set_only_the_recipes_options(tmp_path: Path) -> None:
    import dataclasses

    (request,) = plan("qpulib", arch=None, target="debian-armv7", version=None, package=None,
                      settings={})  # fmt: skip
    template = tmp_path / "qpulib.Dockerfile.j2"
    recipe = dataclasses.replace(request.recipe, template=template)
    template.write_text('{% set effective_options = {"NO_SUCH": "1"} %}FROM scratch\n')
    with pytest.raises(TemplateError, match="NO_SUCH") as raised:
        render_dockerfile(dataclasses.replace(request, recipe=recipe), [tmp_path])
    assert "recipe's options" in raised.value.problem
    template.write_text("{% set effective_options = {} %}FROM scratch\n")
    assert render_dockerfile(dataclasses.replace(request, recipe=recipe), [tmp_path]).options == (
        request.built_options
    )


def test_torch_26_carries_its_patches_whatever_the_source() -> None:
    """The recipe's patches for 2.6 are copied in and applied to the tree before setup.py, from
    Debian's source as from git; other versions get none."""
    debian, git = _render("torch", "trixie-armv7"), _render("torch", "debian-aarch64")
    for text in (debian, git):
        build = text.split(" AS build\n", 1)[1]
        applied = build.index("patch -p1 --forward --fuzz=0")
        assert build.index("COPY patches/ /tmp/dockerarch-patches/") < applied
        assert build.index("WORKDIR /src/pytorch") < applied < build.index("setup.py bdist_wheel")
    # Debian's tree also gets its wheel's $ORIGIN back and upstream's unversioned libraries (one
    # copy of each in the wheel); a git tree has both
    assert ("for p in 2.6-save-for-backward-format.patch 2.6-tcpstore-32bit-sizes.patch "
            "debian-2.6-wheel-rpath.patch debian-2.6-wheel-soversion.patch;") in debian  # fmt: skip
    assert "for p in 2.6-save-for-backward-format.patch 2.6-tcpstore-32bit-sizes.patch;" in git
    assert "dockerarch-patches" not in _render("torch", "rpi3", version="1.4.0")


def _runtime_packages(text: str) -> set[str]:
    """The packages the runtime-base stage (the runtime image's and the build's base) installs."""
    stage = text.split(" AS runtime-base-stage\n", 1)[1].split(" AS runtime-base\n", 1)[0]
    return set(re.findall(r"^ {8}([a-z0-9][a-z0-9.+-]+) \\?$", stage, re.MULTILINE))


def test_torchvision_installs_the_libraries_of_a_debian_style_torch() -> None:
    """On Debian 13 targets torch is built against trixie's libraries: torchvision's build and
    runtime image install every library torch's own runtime image has (or `import torch` fails
    in both), with gloo and XNNPACK on aarch64 only; other targets' torch carries its own."""
    for target in ("trixie-aarch64", "trixie-armv7"):
        torch, vision = _render("torch", target), _render("torchvision", target)
        extra = _runtime_packages(torch) - {"libopenblas0", "libgomp1", "python3-numpy"}
        assert "libsleef-dev" in extra and extra <= _runtime_packages(vision), target
        build = vision.split(" AS build\n", 1)[1]
        assert "libsleef-dev" in build and "protobuf-compiler" not in _runtime_packages(vision)
        assert ("libgloo-dev" in extra) is (target == "trixie-aarch64")
        assert "TORCH_SYSTEM_LIBS" not in vision  # a switch of the template, not of setup.py
    git = _render("torchvision", "debian-aarch64")
    assert "libsleef-dev" not in git and "libfmt-dev" not in git
    chosen = _render("torchvision", "debian-aarch64", settings={"TORCH_SYSTEM_LIBS": "1"})
    assert "libsleef-dev" in chosen and "libgloo-dev" in chosen


def test_torch_for_armv7_is_debian_13s(capsys: pytest.CaptureFixture[str]) -> None:
    """`--arch armv7` means the recipe's own armv7 target (Debian 13, Debian's source package of
    torch 2.6.0), and says so; aarch64 keeps the arch's default target and git."""
    code, out, err = run(["generate", "torch", "--arch", "armv7"], capsys)
    assert code == 0 and out == _render("torch", "trixie-armv7")
    assert "torch for --arch armv7 builds for trixie-armv7" in " ".join(err.split())
    assert "source --only-source pytorch" in out and "linux/arm/v7" in out
    code, out, err = run(["generate", "torch", "--arch", "aarch64"], capsys)
    assert code == 0 and out == _render("torch", "debian-aarch64") and err == ""
    assert "git clone --depth 1 --branch v2.6.0" in out


def test_generate_prints_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["generate", "wheel", "--arch", "armhf", "--package", "zstandard==0.23.0"], capsys
    )
    assert code == 0 and out == _render("wheel", "debian-armv7")
    code, out, _ = run(
        ["generate", "wheel", "-a", "armv7", "-p", "zstandard==0.23.0", "--accel", "none"], capsys
    )
    assert code == 0 and out == _render("wheel", "debian-armv7", "none")
    target = tmp_path / "Dockerfile"
    code, out, _err = run(["generate", "numpy", "-t", "rpi3", "-o", str(target)], capsys)
    assert code == 0 and out == "" and target.read_text() == _render("numpy", "rpi3")
    assert [p.name for p in tmp_path.iterdir()] == ["Dockerfile"]  # no temporary file left


def test_failed_generate_leaves_the_old_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "Dockerfile"
    target.write_text("good\n")
    code, _, _ = run(
        ["generate", "numpy", "-t", "rpi3", "--set", "BLAS=mkl", "-o", str(target)], capsys
    )
    assert code == 2 and target.read_text() == "good\n"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (
            ["generate", "torhc", "--arch", "armv7"],
            2,
            "Unknown recipe 'torhc'. Did you mean 'torch'?",
        ),
        (
            ["generate", "torch", "--target", "rpi4"],
            2,
            "Unknown target 'rpi4'. Did you mean 'rpi3'?",
        ),
        (["generate", "torch", "--arch", "armv9"], 2, "Unknown arch 'armv9'"),
        (
            ["generate", "torch", "--arch", "armv7", "--version", "2.3.1;id"],
            2,
            "not a valid version",
        ),
        (["generate", "wheel", "--arch", "armv7", "--package", "x==1;id"], 2, "not a package spec"),
        (["generate", "wheel", "--arch", "armv7"], 2, "needs --package"),
        (
            ["generate", "torch", "--arch", "armv7", "--package", "x==1"],
            2,
            "does not take --package",
        ),
        (["generate", "torch", "--arch", "armv7", "--set", "USE_CUDA=$(id)"], 2, "USE_CUDA"),
        (["generate", "torch", "--arch", "armv7", "--set", "NOPE=1"], 2, "has no option 'NOPE'"),
        (["generate", "qpulib", "--target", "pynq-zu"], 2, "does not build for target 'pynq-zu'"),
        (["generate", "torch"], 2, "exactly one of --arch and --target"),
        (
            ["generate", "torch", "--arch", "armv7", "--version", "2.5.1"],
            2,
            "torch 2.5.1 for trixie-armv7 (debian trixie, glibc 2.41): torch 2.3 to 2.5 do not "
            "compile for 32-bit ARM",
        ),
        (
            ["generate", "torch", "--target", "debian-armv7", "--set", "SOURCE=debian"],
            2,
            "torch 2.6.0 for debian-armv7 (debian bookworm, glibc 2.36): Debian's source package "
            "of torch 2.x is Debian 13's",
        ),
        (["targets", "show", "pynq"], 2, "Unknown target 'pynq'"),
        (
            ["generate", "torch", "--arch", "armv7", "--accel", "turbo"],
            2,
            "--accel turbo is not a mode",
        ),
    ],
)
def test_bad_input(
    argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    got, out, err = run(argv, capsys)
    assert got == code
    assert message in " ".join(err.split())
    assert "Traceback" not in err and out == ""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's project with its own recipe 'hello'."""
    (tmp_path / "dockerfiles").mkdir()
    (tmp_path / "contexts" / "hello").mkdir(parents=True)
    (tmp_path / "contexts" / "hello" / "recipe.yaml").write_text(
        'description: a project recipe\nversions: {known: ["1.0"], default: "1.0"}\n'
        "smoke: [hello]\n"
    )
    monkeypatch.setenv("DOCKERARCH_PROJECT", str(tmp_path))
    return tmp_path


def _template(project: Path, body: str) -> Path:
    path = project / "dockerfiles" / "hello.Dockerfile.j2"
    path.write_text(
        '{% extends "_partials/layout.Dockerfile.j2" %}\n{% block build %}\n'
        + body
        + "\n{% endblock %}\n"
    )
    return path


def test_project_recipe_renders(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _template(project, "RUN echo {{ recipe.version }} > /out/hello")
    code, out, _ = run(["generate", "hello", "--arch", "aarch64"], capsys)
    assert code == 0 and "RUN echo 1.0 > /out/hello" in out


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("RUN echo {{ target.nonexistent }}", ":3: 'dict object' has no attribute 'nonexistent'"),
        ("RUN echo {{ nothing }}", ":3: 'nothing' is undefined"),
        ("RUN echo {{ target.name ", ":4: "),
        ("RUN echo {{ options }}", ":3: A template printed a dict"),
    ],
)
def test_template_errors_name_file_and_line(
    project: Path, body: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _template(project, body)
    code, _, err = run(["generate", "hello", "--arch", "armv7"], capsys)
    assert code == 3
    assert f"{path}{message}" in " ".join(err.split())
    assert "Traceback" not in err


def test_unknown_key_in_recipe_yaml(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _template(project, "RUN true")
    (project / "contexts" / "hello" / "recipe.yaml").write_text("versions: {defualt: '1.0'}\n")
    code, _, err = run(["generate", "hello", "--arch", "armv7"], capsys)
    err = " ".join(err.split())
    assert code == 3
    assert "Unknown key 'versions.defualt'" in err and "Did you mean 'default'?" in err


def test_listing_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["targets"], capsys)
    assert code == 0 and all(name in out for name in TARGETS)
    code, out, _ = run(["targets", "show", "pynq-z1"], capsys)
    assert code == 0
    assert re.search(r"^triplet\s+arm-linux-gnueabihf$", out, re.MULTILINE)
    assert re.search(r"^glibc\s+2\.35$", out, re.MULTILINE)
    code, out, _ = run(["recipes"], capsys)
    assert code == 0
    assert re.search(r"^torch\s+1\.1\.0, 1\.4\.0, 2\.1\.2, 2\.3\.1, 2\.6\.0\*", out, re.MULTILINE)
    assert re.search(r"^qpulib .* debian-armv7,rpi3,trixie-armv7 ", out, re.MULTILINE)


def test_the_qpu_dot_example_renders_against_torch_and_qpulib(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/qpu-dot (seed 004's extension) is a project a user builds as it is."""
    monkeypatch.setenv(
        "DOCKERARCH_PROJECT", str(Path(__file__).parents[2] / "examples" / "qpu-dot")
    )
    code, out, err = run(["generate", "qpu-dot", "--target", "trixie-armv7"], capsys)
    assert code == 0, err
    build = out.split(" AS build\n", 1)[1].split("\nFROM ", 1)[0]
    assert (
        "from=torch-wheels,target=/torch-wheels" in build and "from=qpulib,target=/qpulib" in build
    )
    assert "pip-install /run/dockerarch-native /torch-wheels/torch-2.6.0[-+]*.whl" in build
    assert "ENV QPU=0" in build
    code, _, err = run(["generate", "qpu-dot", "--target", "debian-aarch64"], capsys)
    assert code != 0 and "Traceback" not in err


def test_a_project_s_opencv_patch_is_applied_to_the_tree_the_build_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's project patches opencv by its own contexts/opencv (the built-in recipe.yaml plus
    `patches:`): applied with no fuzz to the unpacked sdist before the compile, natively in a
    hybrid build (patch installed there only then), in the emulated stage in a plain one."""
    import shutil

    own = tmp_path / "contexts" / "opencv"
    shutil.copytree(paths.builtin_root() / "contexts" / "opencv", own)
    (own / "patches").mkdir()
    (own / "patches" / "one-line.patch").write_text("--- a/x\n+++ b/x\n")
    with (own / "recipe.yaml").open("a") as recipe:
        recipe.write('patches:\n  "4.10.*": [one-line.patch]\n')
    unpatched = _render("opencv", "rpi3")
    monkeypatch.setenv("DOCKERARCH_PROJECT", str(tmp_path))
    hybrid, plain = _render("opencv", "rpi3"), _render("opencv", "rpi3", mode="none")
    sources = hybrid.split(" AS sources\n", 1)[1].split("\nFROM ", 1)[0]
    assert "for p in one-line.patch;" in sources and " patch" in sources.split("WORKDIR")[0]
    assert "WORKDIR /sdists/opencv-python-headless-tree" in sources
    assert "uv build --wheel" in hybrid.split(" AS build\n", 1)[1]
    build = plain.split(" AS build\n", 1)[1]
    assert (build.index("tar -xzf") < build.index("WORKDIR /src/opencv")
            < build.index("for p in one-line.patch;") < build.index("pip wheel -v"))  # fmt: skip
    unpatched_sources = unpatched.split(" AS sources\n", 1)[1].split("\nFROM ", 1)[0]
    assert "dockerarch-patches" not in unpatched and "apt-get install" not in unpatched_sources
    assert "dockerarch-patches" not in _render("opencv", "rpi3", version="4.9.0.80")


def test_a_set_members_build_step_reads_only_its_build_part_of_the_set(tmp_path: Path) -> None:
    """A wheel set's member: its build step mounts the named context `wheelset-build` (its build
    environment's wheels, build-constraints.txt), its runtime image's install `wheelset` (its
    run-time closure). The build stage does not change with what only its runtime image takes
    (the wheel alone first, what it needs at run time, the packages those wheels need): built
    again once its wheel said what it needs, the member's compile step is the cached one."""
    from dockerarch.artifacts import ArtifactReport
    from dockerarch.recipes import local_package

    tree = tmp_path / "pkg-1.0"
    tree.mkdir()
    (tree / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "1.0"\n')
    (request,) = plan("wheel", arch=None, target="debian-armv7", version=None, package="six",
                      settings={})  # fmt: skip
    member = replace(for_generate(request, "hybrid"), package=local_package(tree),
                     wheelset=tmp_path / "run", wheelset_build=tmp_path / "build")  # fmt: skip

    def stages(**kw: object) -> tuple[str, str]:
        text = render(replace(member, **kw), paths.template_dirs())
        build = text.split("FROM runtime-base AS build\n")[1].split("FROM scratch AS artifacts\n")[
            0
        ]
        return build, text

    first, _ = stages(wheel_only=True)
    again, again_text = stages(
        runtime_needs=("libopenblas0-pthread",),
        installed_with=(
            ArtifactReport(
                name="six-1.0-py3-none-any.whl",
                sha256="0" * 64,
                size=1,
                kind="wheel",
                elf_files=0,
                glibc=None,
                glibcxx=None,
                top_level=("six",),
            ),
        ),
    )
    assert first == again
    assert "--mount=type=bind,from=wheelset-build,target=/run/dockerarch-set" in first
    assert "from=wheelset," not in first
    runtime = again_text.split("FROM runtime-base AS runtime\n")[1]
    assert "--mount=type=bind,from=wheelset,target=/run/dockerarch-set" in runtime
    assert "from=wheelset-build" not in runtime


def test_a_recipe_with_nothing_to_clone_asks_for_its_tree_before_anything_runs() -> None:
    from dockerarch.errors import UsageError

    with pytest.raises(UsageError, match=r"'glow' builds only from a tree you give.*--source DIR"):
        plan("glow", arch="amd64", target=None, version=None, package=None, settings={},
             to_build=True)  # fmt: skip
    # push, upload and export name a result: no tree needed
    (named,) = plan("glow", arch="amd64", target=None, version=None, package=None, settings={})
    assert named.result_name == "glow-05dd99b97"
    text = _render("glow", "debian-amd64")  # with a tree: Glow's patches, ccache, no -march=native
    assert (
        "0005-cxx17-for-std-optional.patch" in text
        and "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache" in text
    )
