"""`dockerarch build wheel -r`: a requirements file becomes every wheel the board needs, built once
per target in dependency order, installed with no compiler and no network.

The packages are the test's own (settest_index): b needs a C extension a to build (a's header,
from a's wheel) and at run time, and a pure-Python c from the same loopback index; setuptools
comes from pip's default index. Everything is built for armv7, hybrid, under QEMU.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockerarch.pipconfig import default_index
from tests.integration.conftest import dockerarch
from tests.integration.settest_index import (
    B_C,
    BROKEN,
    OLD,
    A,
    B,
    C,
    D,
    G,
    M,
    pure_wheel,
    serve,
    write_index,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("settest-index")
    write_index(root)
    with serve(root) as url:
        yield url


def build_set(
    index: str, out: Path, requirements: str, *extra: str, arch: str = "armv7",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    req = out / "requirements.txt"
    req.write_text(requirements)
    return dockerarch("build", "wheel", "-r", str(req), "--index-url", index, "--extra-index-url",
                      default_index(), "--arch", arch, "--out", str(out), "--progress", "plain",
                      *extra, env=env, timeout=1800)  # fmt: skip


@pytest.fixture(scope="module")
def built(
    index: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    # the indexes as a machine's pip has them: in its configuration, not on the command line
    out = tmp_path_factory.mktemp("settest-out")
    (out / "pip.conf").write_text(f"[global]\nindex-url = {index}\n"
                                  f"[install]\nextra-index-url = {default_index()}\n")  # fmt: skip
    (out / "requirements.txt").write_text(f"# the board's environment\n{B}\n")
    done = dockerarch("build", "wheel", "-r", str(out / "requirements.txt"), "--arch", "armv7",
                      "--out", str(out), "--progress", "plain", timeout=1800,
                      env={"PIP_CONFIG_FILE": str(out / "pip.conf")})  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return out, done


def said(done: subprocess.CompletedProcess[str]) -> str:
    """stderr with its line wrapping undone."""
    return " ".join(done.stderr.split())


def uv_build_step_cached(log: str) -> bool:
    """Whether the last buildx invocation in build.log that builds a wheel with uv (the build
    step; build.log holds several invocations, each after dockerarch's `### buildx: stage` line
    and numbering its steps from #1) took it from BuildKit's cache."""
    (*_, invocation) = [part for part in re.split(r"^### buildx: stage .*$", log, flags=re.M)
                        if " uv build " in part]  # fmt: skip
    steps = re.findall(r"^#(\d+) \[build [^\]]*\] RUN .* uv build ", invocation, re.M)
    return bool(steps) and all(re.search(rf"^#{n} CACHED$", invocation, re.M) for n in steps)


def set_dir(out: Path) -> Path:
    return out / "debian-armv7" / "sets" / "requirements"


def test_the_requirements_become_one_set_with_each_package_built_once_in_order(
    index: str,
    built: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, done = built
    assert done.stdout.strip().splitlines()[-1] == str(set_dir(out))
    manifest = json.loads((set_dir(out) / "manifest.json").read_text())
    # resolved where this machine's pip would: the index pip's configuration names
    assert manifest["indexes"] == [default_index(), index], manifest["indexes"]
    assert f"pip's configuration: {out / 'pip.conf'}" in said(done)
    assert manifest["build_order"] == [f"{A}==1.0", f"{B}==1.0"]
    how = {d["name"]: (d["how"], d["runtime"]) for d in manifest["distributions"]}
    assert how[A] == ("built", True) and how[B] == ("built", True)
    assert how[C] == ("fetched", True)
    assert how["setuptools"] == (
        "fetched",
        False,
    )  # a build requirement, not installed on the board
    # one build of a for the target, and the set holds exactly what the board installs
    results = sorted(
        p.name for p in (out / "debian-armv7").iterdir() if p.name.startswith("dockerarch_settest")
    )
    assert results == ["dockerarch_settest_a-1.0", "dockerarch_settest_b-1.0"]
    wheels = sorted(p.name for p in set_dir(out).glob("*.whl"))
    assert [w.split("-")[0] for w in wheels] == [
        "dockerarch_settest_a",
        "dockerarch_settest_b",
        "dockerarch_settest_c",
    ]
    assert all("linux_armv7l" in w for w in wheels if not w.startswith("dockerarch_settest_c"))
    # the lock: every file pinned with its sha256
    lock = (set_dir(out) / "requirements.txt").read_text()
    for wheel in wheels:
        digest = hashlib.sha256((set_dir(out) / wheel).read_bytes()).hexdigest()
        assert f"--hash=sha256:{digest}" in lock
    assert re.findall(r"^([a-z0-9-]+)==1\.0", lock, re.M) == [A, B, C]
    assert manifest["installed_check"] == "imported a_pkg b_pkg c_mod"
    # b's runtime image installed a and c from the set with it, and its checks covered them
    # (libraries, imports, versions): that image is the set's, not installed a second time
    b = json.loads(
        (out / "debian-armv7" / "dockerarch_settest_b-1.0" / "manifest.json").read_text()
    )
    assert sorted(b["installed_with"]) == [
        w for w in wheels if not w.startswith("dockerarch_settest_b")
    ]
    assert b["smoke"] == "imported a_pkg b_pkg c_mod"
    assert (
        "not installed again" in done.stderr
        and "installing it from itself alone" not in done.stderr
    )
    assert b["image"]["tag"] in (set_dir(out) / "check.log").read_text()


def test_b_is_compiled_against_the_set_s_own_build_of_a(
    built: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """a's build draws a token into its header; b's object code holds the token of the a in the
    set, so b was compiled against that build of a, not one made on the side."""
    out, _ = built
    a_wheel = next(set_dir(out).glob("dockerarch_settest_a-*.whl"))
    b_wheel = next(set_dir(out).glob("dockerarch_settest_b-*.whl"))
    with zipfile.ZipFile(a_wheel) as archive:
        header = archive.read("a_pkg/include/a_token.h").decode()
    token = re.search(r'A_TOKEN "([0-9a-f]{16})"', header)
    assert token, header
    with zipfile.ZipFile(b_wheel) as archive:
        objects = [
            archive.read(n)
            for n in archive.namelist()
            if n.startswith("b_pkg/_b") and n.endswith(".so")
        ]
    assert len(objects) == 1 and token.group(1).encode() in objects[0]
    log = (out / "debian-armv7" / "dockerarch_settest_b-1.0" / "build.log").read_text()
    if "settest-b: compiling against" in log:  # not when BuildKit had the step cached
        assert f"token {token.group(1)}" in log  # b's setup.py imported the set's a
    assert "--no-cache --no-index --no-build --find-links /run/dockerarch-set" in log


def test_the_set_installs_on_the_board_with_no_network_and_no_compiler(
    built: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """As a board would: pip with the set directory and nothing else, --only-binary,
    --require-hashes, the network off, into a fresh environment that sees none of the image's
    own packages (the target's Python and pip, no compiler run); then every module imports from
    there and b sees a's token."""
    out, _ = built
    image = "dockerarch/requirements:set-debian-armv7"
    script = (
        "python3 -m venv --without-pip /tmp/board && "
        "python3 -m pip --python /tmp/board/bin/python install -q --no-index --find-links /set "
        "--only-binary :all: --require-hashes -r /set/requirements.txt && "
        "cd /tmp && /tmp/board/bin/python -c 'import a_pkg, b_pkg, c_mod; "
        'assert a_pkg.__file__.startswith("/tmp/board/"), a_pkg.__file__; '
        'assert b_pkg.a_token_seen() == a_pkg.token(); print("board ok", c_mod.ANSWER)\''
    )
    done = subprocess.run(["docker", "run", "--rm", "--platform", "linux/arm/v7", "--network", "none",
                           "-v", f"{set_dir(out)}:/set:ro", image, "sh", "-c", script],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("board ok 42")


def test_the_set_s_image_is_unpacked_by_the_native_uv(
    built: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """A set's image installs from local files only, so the x86-64 uv of the toolchain image
    unpacks it (the emulated pip spent seconds starting and resolving per image); the stage's own
    Python tells uv its tags and scheme, and the modules are byte-compiled natively as before."""
    out, _ = built
    # the set's image is b's runtime image (b's closure is the whole set): b's build made it
    check = (out / "debian-armv7" / "dockerarch_settest_b-1.0" / "build.log").read_text()
    step = re.search(
        r"^#(\d+) \[runtime \d+/\d+\] RUN --mount=type=bind,from=artifacts.*$", check, re.M
    )
    assert step, check[-3000:]
    assert re.search(rf"^#{step.group(1)} CACHED$", check, re.M) or (
        "pip-install: installing from local files with the x86-64 uv" in check
        and "pip-install: byte-compiled the" in check
    ), check[-3000:]
    script = (
        "import importlib.metadata as m, importlib.util, c_mod, a_pkg\n"
        "print(m.distribution('dockerarch-settest-a').read_text('INSTALLER').strip())\n"
        "print(a_pkg.__file__.startswith('/usr/local/lib/python3'))\n"
        "print(open(importlib.util.cache_from_source(c_mod.__file__), 'rb').read(4)"
        " == importlib.util.MAGIC_NUMBER)\n"
    )
    done = subprocess.run(["docker", "run", "--rm", "--platform", "linux/arm/v7", "--network", "none",
                           "dockerarch/requirements:set-debian-armv7", "python3", "-B", "-c", script],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.stdout.split() == ["uv", "True", "True"], done.stdout + done.stderr


def test_the_set_s_checked_image_is_the_root_export_rootfs_writes(
    built: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """export-rootfs (and export-img) -r FILE: the image the set was installed into and checked,
    found by the set's files, as its manifest records it."""
    out, _ = built
    record = json.loads((set_dir(out) / "manifest.json").read_text())["image"]
    assert record["tag"] == "dockerarch/requirements:set-debian-armv7"
    assert record["id"].startswith("sha256:")
    tarball = tmp_path / "root.tar"
    done = dockerarch("export-rootfs", "wheel", "-r", str(out / "requirements.txt"), "--arch",
                      "armv7", "--out", str(out), "--tarball", str(tarball), timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    for module in ("a_pkg/__init__.py", "b_pkg/__init__.py", "c_mod.py"):
        assert any(n.endswith(f"-packages/{module}") for n in names), module
    # the files ask for something else now: refused, naming the difference
    changed = tmp_path / "requirements.txt"
    changed.write_text((out / "requirements.txt").read_text() + f"{C}\n")
    done = dockerarch("export-rootfs", "wheel", "-r", str(changed), "--arch", "armv7", "--out",
                      str(out), "--tarball", str(tmp_path / "other.tar"))  # fmt: skip
    assert done.returncode == 2 and "built from other requirements" in " ".join(done.stderr.split())
    assert not (tmp_path / "other.tar").exists()


def test_a_second_run_builds_nothing_again(
    index: str, built: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    out, _ = built
    before = {p.name: p.read_bytes() for p in set_dir(out).glob("*.whl")}
    done = build_set(index, out, f"{B}\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{A}==1.0 already built" in done.stderr and f"{B}==1.0 already built" in done.stderr
    assert "set: building" not in done.stderr
    assert {p.name: p.read_bytes() for p in set_dir(out).glob("*.whl")} == before


def test_b_compiled_again_against_the_same_a_comes_from_the_compiler_cache(
    index: str, built: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """b's C file includes a's header from b's build environment, whose path is new in every
    build (uv's builds-v0/.tmpXXXX), as numpy's and pybind11's headers are for the packages built
    against them: b built again against the same a (its result gone, a reused; another
    SOURCE_DATE_EPOCH, so that its compile step runs again) takes its object from ccache."""
    out, _ = built
    again = tmp_path / "out"
    shutil.copytree(out / "debian-armv7", again / "debian-armv7", symlinks=True,
                    ignore=shutil.ignore_patterns("dockerarch_settest_b-1.0"))  # fmt: skip
    epoch = str(1_700_000_000 + uuid.uuid4().int % 100_000_000)  # a step key no run had
    done = build_set(index, again, f"{B}\n", env={"SOURCE_DATE_EPOCH": epoch})
    assert done.returncode == 0, done.stderr[-3000:]
    text = said(done)
    assert f"{A}==1.0 already built" in text and f"set: building {B}==1.0" in text, text[-3000:]
    # its one compile, from the cache: the header's path went through the same link both times
    assert re.search(r"ccache: 1 of 1 compiles from the cache", text), text[-3000:]
    b = json.loads(
        (again / "debian-armv7" / "dockerarch_settest_b-1.0" / "manifest.json").read_text()
    )
    assert b["hybrid"]["ccache_hits"] == 1 and b["hybrid"]["ccache_misses"] == 0, b["hybrid"]
    # and it is the same object code: compiled against the same a (its token)
    a_wheel = next(set_dir(out).glob("dockerarch_settest_a-*.whl"))
    with zipfile.ZipFile(a_wheel) as archive:
        token = re.search(
            r'A_TOKEN "([0-9a-f]{16})"', archive.read("a_pkg/include/a_token.h").decode()
        )
    assert token
    b_wheel = next((again / "debian-armv7" / "dockerarch_settest_b-1.0").glob("*.whl"))
    with zipfile.ZipFile(b_wheel) as archive:
        (so,) = [archive.read(n) for n in archive.namelist() if n.endswith(".so")]
    assert token.group(1).encode() in so


def test_a_requirement_nothing_satisfies_is_one_paragraph_before_anything_is_built(
    index: str, tmp_path: Path
) -> None:
    done = build_set(index, tmp_path, f"{C}\ndockerarch-settest-nothere==1.0\n")
    assert done.returncode == 9, done.stderr
    assert "dockerarch-settest-nothere==1.0" in said(done) and "Traceback" not in done.stderr
    assert not (tmp_path / "debian-armv7" / "sets").exists()


def test_a_wrong_hash_is_refused_naming_the_file(index: str, tmp_path: Path) -> None:
    done = build_set(index, tmp_path, f"{C}==1.0 --hash=sha256:{'0' * 64}\n")
    assert done.returncode == 9, done.stderr
    assert "dockerarch_settest_c-1.0-py3-none-any.whl" in said(done)
    assert "sha256" in done.stderr and "Traceback" not in done.stderr
    assert not (
        tmp_path / "debian-armv7" / "wheels" / "dockerarch_settest_c-1.0-py3-none-any.whl"
    ).exists()


def test_no_deps_names_the_dependency_that_has_no_wheel_before_building(
    index: str, tmp_path: Path
) -> None:
    done = build_set(index, tmp_path, f"{B}\n", "--no-deps")
    assert done.returncode == 2, done.stderr
    assert f"{A}==1.0 (needed by {B}==1.0)" in said(done) and "Traceback" not in done.stderr
    assert not (tmp_path / "debian-armv7" / "dockerarch_settest_b-1.0").exists()


def test_a_package_that_does_not_build_is_named_and_the_rest_is_kept(
    index: str, tmp_path: Path
) -> None:
    done = build_set(index, tmp_path, f"{BROKEN}\n{C}\n")
    assert done.returncode == 6, done.stderr[-3000:]
    assert (
        f"{BROKEN}==1.0 could not be built for debian-armv7 (needed by the requirements)"
        in said(done)
    )
    assert "this is not C" in done.stderr  # the compiler's own words, from the step's tail
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "debian-armv7" / "sets").exists()  # no set that lacks a package
    assert (
        tmp_path / "debian-armv7" / "wheels" / "dockerarch_settest_c-1.0-py3-none-any.whl"
    ).is_file()
    assert list((tmp_path / "debian-armv7").glob("dockerarch_settest_broken-1.0.failed.log"))


def board_install(
    image: str, index: str, set_dir: Path, network: str
) -> subprocess.CompletedProcess[str]:
    """pip on the 'board' (the set's runtime image, emulated) from ``index`` alone, with the
    set's lock, then every module imported."""
    script = (
        f"python3 -m pip install -q --no-cache-dir --index-url {index} --only-binary :all: "
        "--require-hashes --target /tmp/site -r /lock/requirements.txt && "
        "PYTHONPATH=/tmp/site python3 -c 'import a_pkg, b_pkg, c_mod; "
        'assert b_pkg.a_token_seen() == a_pkg.token(); print("board ok")\''
    )
    return subprocess.run(["docker", "run", "--rm", "--platform", "linux/arm/v7", "--network", network,
                           "-v", f"{set_dir}:/lock:ro", image, "sh", "-c", script],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def test_upload_publishes_the_whole_set_and_prints_the_board_s_line(
    built: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    out, _ = built
    run = f"s{uuid.uuid4().hex[:8]}"
    config = tmp_path / "registry.yaml"
    config.write_text(f"index:\n  url: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/\n"
                      f"  simple: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/+simple/\n")  # fmt: skip
    env = {"DOCKERARCH_REGISTRY_CONFIG": str(config)}
    done = dockerarch("upload", "wheel", "-r", str(out / "requirements.txt"), "--arch", "armv7",
                      "--out", str(out), env=env, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    simple = f"http://127.0.0.1:3141/dockerarch/{run}-debian-armv7/+simple/"
    assert (f"pip install --index-url {simple} --only-binary :all: --require-hashes "
            "-r requirements.txt") in said(done)  # fmt: skip
    assert len(done.stdout.strip().splitlines()) == 3  # a, b and c, each with its sha256
    installed = board_install(
        "dockerarch/requirements:set-debian-armv7", simple, set_dir(out), "host"
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert installed.stdout.strip().endswith("board ok")


def test_archive_writes_the_set_as_one_static_index(
    built: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    out, _ = built
    done = dockerarch("upload", "wheel", "-r", str(out / "requirements.txt"), "--arch", "armv7",
                      "--out", str(out), "--archive", str(tmp_path / "idx"), timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"--require-hashes -r {set_dir(out) / 'requirements.txt'}" in said(done)
    simple = tmp_path / "idx" / "debian-armv7" / "simple"
    assert sorted(p.name for p in simple.iterdir() if p.is_dir()) == [A, B, C]
    script = (
        "python3 -m pip install -q --no-cache-dir --index-url file:///idx/debian-armv7/simple/ "
        "--only-binary :all: --require-hashes --target /tmp/site -r /lock/requirements.txt && "
        "PYTHONPATH=/tmp/site python3 -c 'import b_pkg, c_mod; print(\"board ok\")'"
    )
    installed = subprocess.run(
        ["docker", "run", "--rm", "--platform", "linux/arm/v7", "--network", "none",
         "-v", f"{set_dir(out)}:/lock:ro", "-v", f"{tmp_path / 'idx'}:/idx:ro",
         "dockerarch/requirements:set-debian-armv7", "sh", "-c", script],
        capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert installed.stdout.strip().endswith("board ok")


def test_the_user_s_own_tests_run_on_the_target_with_the_set(
    index: str, built: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """cibuildwheel's test-requires/test-command: pytest (from the index, fetched for the board)
    runs the user's suite in the set's image under QEMU, network off; a failing test fails the
    build with its output and leaves the earlier set as it was."""
    out, _ = built
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_board.py").write_text(
        "import platform, a_pkg, b_pkg\n\n"
        "def test_b_sees_a():\n    assert b_pkg.a_token_seen() == a_pkg.token()\n\n"
        "def test_runs_on_the_board():\n    assert platform.machine() == 'armv7l'\n"
    )
    args = ("--test-requires", "pytest", "--test", "python3 -m pytest -q -p no:cacheprovider {project}/tests",
            "--test-sources", str(project))  # fmt: skip
    done = build_set(index, out, f"{B}\n", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tests passed: 2 passed" in done.stderr
    manifest = json.loads((set_dir(out) / "manifest.json").read_text())
    assert manifest["tests"].startswith("2 passed")
    assert "pytest" not in (set_dir(out) / "requirements.txt").read_text()  # not on the board
    (project / "tests" / "test_board.py").write_text(
        "def test_that_fails():\n    assert 'answer' == 41\n"
    )
    before = (set_dir(out) / "manifest.json").read_bytes()
    failed = build_set(index, out, f"{B}\n", *args)
    assert failed.returncode == 8, failed.stderr[-3000:]
    assert "the tests (python3 -m pytest" in said(failed) and "1 failed" in failed.stderr
    assert "Traceback" not in failed.stderr.split("error:", 1)[0]
    assert (set_dir(out) / "manifest.json").read_bytes() == before  # the earlier set stands


def test_fortran_builds_hybrid_with_every_compiler_run_native(index: str, tmp_path: Path) -> None:
    """A member with Fortran code (as scipy has): the grafted cross gfortran compiles it behind
    the same wrapper, natively; libgfortran5 is installed on the board for it. A package that
    needs it at run time (as LightGBM needs scipy) gets libgfortran5 in its runtime image too:
    its own build never linked against it, the Fortran member's build found it."""
    done = build_set(index, tmp_path, f"{G}\n", "--name", "fortran")
    assert done.returncode == 0, done.stderr[-4000:]
    results = tmp_path / "debian-armv7"
    manifest = json.loads((results / "dockerarch_settest_f-1.0" / "manifest.json").read_text())
    hybrid = manifest["hybrid"]
    assert hybrid["emulated"] == 0 and hybrid["native"] == hybrid["runs"] >= 2  # gfortran and gcc
    assert (
        hybrid["compiles"] >= 2
    )  # the Fortran file (its setup.py compiles it with $FC) and the C one
    assert "libgfortran5" in manifest["needs_apt"]
    user = json.loads((results / "dockerarch_settest_g-1.0" / "manifest.json").read_text())
    assert user["needs_apt"] == [] and user["smoke"]  # its import loaded f's libgfortran
    assert "libgfortran5" in user["runtime_needs"]  # installed for f, said in g's manifest
    text = said(done)
    assert "with libgfortran5, which the set's wheels installed with it need" in text, text[-3000:]
    sets = json.loads((results / "sets" / "fortran" / "manifest.json").read_text())
    assert "libgfortran5" in sets["needs_apt"]
    ran = subprocess.run(["docker", "run", "--rm", "--platform", "linux/arm/v7", "--network", "none",
                          "dockerarch/fortran:set-debian-armv7", "python3", "-c",
                          "import g_pkg; print(g_pkg.dot())"],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "-3.5"  # 1.5*2 - 2*0.25 - 4*1.5
    # The package and its closure are the whole set: its runtime image, installed from the set
    # and imported, is the set's image, tagged and not installed a second time.
    assert "not installed again" in done.stderr
    assert "installing it from itself alone" not in done.stderr
    ids = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}",
                          user["image"]["tag"], "dockerarch/fortran:set-debian-armv7"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()  # fmt: skip
    assert ids[0] == ids[1] == user["image"]["id"]
    assert user["image"]["tag"] in (results / "sets" / "fortran" / "check.log").read_text()
    assert sets["installed_check"] == user["smoke"]


def test_a_meson_package_asking_for_fortran_builds_natively_for_amd64(
    index: str, tmp_path: Path
) -> None:
    """scipy's case: its meson.build asks for Fortran, and a native amd64 build stage had gcc
    and g++ only (meson: "Unknown compiler(s): [['gfortran']...]", exit 6, so no like-for-like
    amd64 build of a set with scipy). The build system's declaration puts gfortran in the
    build stage; the wheel's libgfortran is found and installed where it runs."""
    done = build_set(index, tmp_path, f"{M}\n", "--name", "mesonfortran", arch="amd64")
    assert done.returncode == 0, done.stderr[-4000:]
    result = tmp_path / "debian-amd64" / "dockerarch_settest_m-1.0"
    manifest = json.loads((result / "manifest.json").read_text())
    assert "libgfortran5" in manifest["needs_apt"] and manifest["smoke"]
    (wheel,) = result.glob("*.whl")
    assert wheel.name.endswith("-linux_x86_64.whl")
    ran = subprocess.run(["docker", "run", "--rm", "--network", "none",
                          "dockerarch/mesonfortran:set-debian-amd64", "python3", "-c",
                          "import m_pkg; print(m_pkg.dot())"],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "-3.5"


def test_a_build_requirement_only_the_build_asks_for_is_added_and_the_member_built_again(
    index: str, tmp_path: Path
) -> None:
    """d's setup.py asks for c (setup_requires), which no static metadata says: its first build
    stops in uv for want of c; c is then resolved for the board, fetched into the set, and d
    built again, successfully."""
    done = build_set(index, tmp_path, f"{D}\n")
    assert done.returncode == 0, done.stderr[-4000:]
    assert (f"set: {D}==1.0's build asks for {C} besides the build requirements it declares"
            in said(done))  # fmt: skip
    manifest = json.loads((set_dir(tmp_path) / "manifest.json").read_text())
    entry = next(d for d in manifest["distributions"] if d["name"] == D)
    assert f"{C}==1.0" in entry["build_env"]
    how = {d["name"]: (d["how"], d["runtime"]) for d in manifest["distributions"]}
    assert how[C] == ("fetched", False)  # only its build needed it
    assert manifest["installed_check"] == "imported d_pkg"


OWN_SETUP = """\
import a_pkg
from setuptools import Extension, setup
setup(packages=["own_pkg"],
      ext_modules=[Extension("own_pkg._own", ["own_pkg/_own.c"], include_dirs=[a_pkg.get_include()])])
"""
OWN_C = B_C.replace('"_b"', '"_own"').replace("PyInit__b", "PyInit__own")


def test_a_project_given_by_its_directory_is_built_in_the_set_with_what_it_needs(
    index: str, built: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """The user's own C extension, a line of the requirements file naming its directory: built
    for the board against the set's a (a's header token in its object code), its dependencies
    resolved and built once (a reused from the set built before), installed with the set and no
    compiler; run again unchanged it is not built again, and a changed file is built."""
    out, _ = built
    own = tmp_path / "own"
    (own / "own_pkg").mkdir(parents=True)
    (own / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "dockerarch-settest-a"]\n'
        'build-backend = "setuptools.build_meta"\n\n[project]\nname = "dockerarch-settest-own"\n'
        f'version = "1.0"\ndependencies = ["{A}", "{C}"]\n'
    )
    (own / "setup.py").write_text(OWN_SETUP)
    (own / "own_pkg" / "__init__.py").write_text("from own_pkg._own import a_token_seen\n")
    (own / "own_pkg" / "_own.c").write_text(OWN_C)
    (own / "build").mkdir()  # a stale build directory of the user's: left out of the sdist
    (own / "build" / "stale.o").write_text("not an object")

    done = build_set(index, out, f"{own}\n", "--name", "own")
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"{A}==1.0 already built" in done.stderr  # the set's a, built once per target
    sets = json.loads((out / "debian-armv7" / "sets" / "own" / "manifest.json").read_text())
    entry = next(e for e in sets["distributions"] if e["name"] == "dockerarch-settest-own")
    assert entry["how"] == "built" and entry["sdist"]["url"].startswith("file://")
    assert {e["name"] for e in sets["distributions"] if e["runtime"]} == {
        "dockerarch-settest-own", A, C}  # fmt: skip
    lock = (out / "debian-armv7" / "sets" / "own" / "requirements.txt").read_text()
    assert "dockerarch-settest-own==1.0" in lock and f"{A}==1.0" in lock
    check = ("import a_pkg, own_pkg, c_mod; assert own_pkg.a_token_seen() == a_pkg.token(); "
             "print(getattr(own_pkg, 'EDIT', 'first'))")  # fmt: skip

    def run_set() -> str:
        ran = subprocess.run(["docker", "run", "--rm", "--platform", "linux/arm/v7", "--network",
                              "none", "dockerarch/own:set-debian-armv7", "python3", "-c", check],
                             capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        return ran.stdout.strip()

    assert run_set() == "first"
    again = build_set(index, out, f"{own}\n", "--name", "own")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "dockerarch-settest-own==1.0 already built" in again.stderr  # the same tree
    (own / "own_pkg" / "__init__.py").write_text(
        "from own_pkg._own import a_token_seen\nEDIT = 'second'\n"
    )
    changed = build_set(index, out, f"{own}\n", "--name", "own")
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert "dockerarch-settest-own==1.0 already built" not in changed.stderr
    assert run_set() == "second"


def dyn_dir(tmp_path: Path) -> Path:
    """dockerarch-settest-dyn: its dependencies in setup.py's install_requires only."""
    dyn = tmp_path / "dyn"
    (dyn / "dyn_pkg").mkdir(parents=True)
    (dyn / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "dockerarch-settest-dyn"\nversion = "1.0"\ndynamic = ["dependencies"]\n'
    )
    needs = f'"{A}", "dockerarch-settest-vendor", "{OLD}"'
    (dyn / "setup.py").write_text(
        f"from setuptools import setup\nsetup(packages=['dyn_pkg'], install_requires=[{needs}])\n"
    )
    (dyn / "dyn_pkg" / "__init__.py").write_text("import a_pkg, old_pkg, vendor_mod\n")
    return dyn


def test_what_only_a_build_knows_a_package_needs_joins_the_set_from_its_wheel(
    index: str, built: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """A project given as pip freeze writes an editable one (-e DIR) whose dependencies only its
    setup.py says (pyproject.toml's dynamic), needing a (the set's, built before), a vendor's
    wheel only a --find-links directory holds, and old, an index's sdist of metadata 1.1 that
    needs c: each built, its wheel read, what it says added to the set (old built in turn, the
    vendor's wheel and c fetched), all installed on the board together; the next run knows it
    all before building anything."""
    out, _ = built
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    pure_wheel(vendor, "dockerarch-settest-vendor", "vendor_mod", "NAME = 'vendor'\n")
    dyn = dyn_dir(tmp_path)
    requirements = f"--find-links {vendor}\n-e {dyn}\n"  # -e DIR: as pip freeze writes it

    done = build_set(index, out, requirements, "--name", "dyn")
    assert done.returncode == 0, done.stderr[-4000:]
    text = said(done)
    assert (
        f"dockerarch-settest-dyn==1.0 from the directory {dyn} (-e: built as a regular wheel"
        in text
    )
    assert "dockerarch-settest-dyn==1.0's sdist does not say what it needs at run time" in text
    assert (f"dockerarch-settest-dyn==1.0 needs {A}==1.0, {OLD}==1.0, "
            "dockerarch-settest-vendor==1.0 (its wheel says)") in text  # fmt: skip
    assert f"{OLD}==1.0 needs {C}==1.0 (its wheel says)" in text
    for key in ("dockerarch-settest-dyn==1.0", f"{OLD}==1.0"):  # the wheel alone first
        assert f"set: {key} is built again after what it needs, for its runtime image" in text
    # ... whose second build takes the first one's wheel: its build step reads only the build
    # environment's part of the set, which what the wheel said did not change
    for name in ("dockerarch-settest-dyn", OLD):
        log = out / "debian-armv7" / f"{name.replace('-', '_')}-1.0" / "build.log"
        assert uv_build_step_cached(log.read_text()), f"{name}'s uv build step ran again"
    assert text.count(f"set: building {OLD}==1.0") == 2
    assert f"{A}==1.0 already built" in text  # the set's a, built once per target
    sets = json.loads((out / "debian-armv7" / "sets" / "dyn" / "manifest.json").read_text())
    assert {e["name"] for e in sets["distributions"] if e["runtime"]} == {
        "dockerarch-settest-dyn", "dockerarch-settest-vendor", A, OLD, C}  # fmt: skip
    assert sets["find_links"] == [str(vendor)]
    lock = (out / "debian-armv7" / "sets" / "dyn" / "requirements.txt").read_text()
    assert f"{OLD}==1.0" in lock and f"{C}==1.0" in lock
    ran = subprocess.run(["docker", "run", "--rm", "--platform", "linux/arm/v7", "--network",
                          "none", "dockerarch/dyn:set-debian-armv7", "python3", "-c",
                          "import dyn_pkg, old_pkg, vendor_mod; print(old_pkg.ANSWER, vendor_mod.NAME)"],
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0 and ran.stdout.strip() == "42 vendor", ran.stderr

    again = build_set(index, out, requirements, "--name", "dyn")
    assert again.returncode == 0, again.stderr[-3000:]
    text = said(again)
    assert "does not say what it needs" not in text and "(its wheel says)" not in text
    assert "dockerarch-settest-dyn==1.0 already built" in text
    assert f"{OLD}==1.0 already built" in text
