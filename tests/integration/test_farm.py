"""Compile farms: two distccd servers started by `dockerarch farm serve` on their own loopback
addresses (127.0.0.2 and 127.0.0.3, free ports), and builds of a many-file C extension sent
through them: hybrid for armv7 and aarch64, native for amd64. Compiles land on both servers (their own logs), the
artifacts are those of a local build, a server killed mid-build is reported and its work done
again, a server without the build's toolchain is refused, and no traffic leaves loopback."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import dockerarch
from .shapes import elf_shape

# the hybrid builds' targets, and a native one (its own build stage's gcc through the farm)
ARCHES = {"debian-armv7": "arm-linux-gnueabihf", "debian-aarch64": "aarch64-linux-gnu",
          "debian-amd64": "x86_64-linux-gnu"}  # fmt: skip
BUILD_ARCHES = "armv7,aarch64,amd64"
PARTS = 36


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def write_project(root: Path, salt: int, funcs: int = 40) -> Path:
    """A setuptools extension of PARTS + 1 C files; ``salt`` is in the code, so that no compile
    comes from an earlier run's ccache."""
    (root / "src").mkdir(parents=True)
    for i in range(PARTS):
        body = "\n".join(
            f"static long f{j}(long x) {{ long s = {salt}; for (long k = 0; k < x; k++) "
            f"s += (k ^ {j}) * {i + 1} % {j + 3}; return s; }}"
            for j in range(funcs)
        )
        total = " + ".join(f"f{j}(x)" for j in range(funcs))
        (root / f"src/part{i:02d}.c").write_text(
            f"{body}\nlong farm_part{i:02d}(long x) {{ return {total}; }}\n"
        )
    decls = "".join(f"long farm_part{i:02d}(long);\n" for i in range(PARTS))
    calls = " + ".join(f"farm_part{i:02d}(x)" for i in range(PARTS))
    (root / "src/farmmod.c").write_text(f"""#define PY_SSIZE_T_CLEAN
#include <Python.h>
{decls}
static const long farm_salt = {salt};
static PyObject *total(PyObject *self, PyObject *args) {{
    long x;
    if (!PyArg_ParseTuple(args, "l", &x)) return NULL;
    return PyLong_FromLong({calls} + farm_salt - farm_salt);
}}
static PyMethodDef methods[] = {{{{"total", total, METH_VARARGS, "sum"}}, {{NULL, NULL, 0, NULL}}}};
static struct PyModuleDef mod = {{PyModuleDef_HEAD_INIT, "farmmod", NULL, -1, methods}};
PyMODINIT_FUNC PyInit_farmmod(void) {{ return PyModule_Create(&mod); }}
""")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '\n[project]\nname = "farmdemo"\nversion = "1.0"\n'
    )
    (root / "setup.py").write_text(
        "from setuptools import Extension, setup\n"
        'setup(ext_modules=[Extension("farmmod", ["src/farmmod.c"]'
        f' + [f"src/part{{i:02d}}.c" for i in range({PARTS})])])\n'
    )
    return root


def serve(address: str, arch: str = BUILD_ARCHES) -> subprocess.CompletedProcess[str]:
    return dockerarch("farm", "serve", "--arch", arch, "--listen", address,
                      "--allow", "127.0.0.0/8", timeout=1800)  # fmt: skip


def server_log(address: str) -> str:
    name = "dockerarch-farm-" + address.replace(":", "-")
    done = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def compiled(log: str, triplet: str) -> list[str]:
    """The project's files a server compiled for ``triplet`` (distccd's COMPILE_OK lines)."""
    return re.findall(rf"COMPILE_OK .* dockerarch-[0-9a-f]{{16}}-{triplet}-gcc (src/\S+\.c)", log)


@pytest.fixture(scope="module")
def servers() -> Iterator[list[str]]:
    done = dockerarch("base", "bootstrap", "--arch", "amd64,armv7,aarch64", "--no-push",
                      timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    addresses = [f"127.0.0.{n}:{free_port(f'127.0.0.{n}')}" for n in (2, 3)]
    try:
        for address in addresses:
            started = serve(address)
            assert started.returncode == 0, started.stderr[-3000:]
            assert started.stdout.strip() == address
        yield addresses
    finally:
        dockerarch("farm", "stop", *addresses, timeout=300)


def wheel_files(out: Path, target: str) -> dict[str, bytes]:
    (wheel,) = (out / target / "farmdemo-1.0").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist() if not n.endswith("RECORD")}


def manifest(out: Path, target: str) -> dict[str, object]:
    return json.loads((out / target / "farmdemo-1.0" / "manifest.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def farm_build(servers: list[str], tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, Path, subprocess.CompletedProcess[str], dict[str, str]]:  # fmt: skip
    """The project built through both servers for both arches, and the server logs' growth."""
    root = tmp_path_factory.mktemp("farm")
    project = write_project(root / "project", salt=random.randrange(1 << 30))
    before = {a: server_log(a) for a in servers}
    out = root / "dist"
    done = dockerarch("build", "wheel", "--package", str(project), "--arch", BUILD_ARCHES,
                      "--out", str(out), "--farm", ",".join(servers), timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    grown = {a: server_log(a)[len(before[a]) :] for a in servers}
    return project, out, done, grown


def test_farm_ls_shows_each_server_its_toolchains_and_that_it_answers(servers: list[str]) -> None:
    done = dockerarch("farm", "ls")
    assert done.returncode == 0, done.stderr
    for address in servers:
        (row,) = [line for line in done.stdout.splitlines() if line.startswith(address + " ")]
        assert "answers" in row and "127.0.0.0/8" in row  # what it accepts, from its --allow
        for target in ARCHES:
            assert re.search(rf"{target} sha256:[0-9a-f]{{16}}", row), row


def test_compiles_land_on_both_servers_and_every_one_is_accounted_for(
    servers: list[str],
    farm_build: tuple[Path, Path, subprocess.CompletedProcess[str], dict[str, str]],
) -> None:
    _, out, done, grown = farm_build
    for target, triplet in ARCHES.items():
        on_servers = {a: compiled(grown[a], triplet) for a in servers}
        # Each server compiled some of this target's files (its own log says which).
        assert all(on_servers.values()), (target, on_servers)
        farm = manifest(out, target)["farm"]
        assert isinstance(farm, dict)
        places = farm["places"]
        # Every compile is placed: on a server or on this machine, and the counts of the
        # servers are what their logs say.
        assert sum(places.values()) == PARTS + 1, places
        assert set(places) <= {*servers, "localhost"}, places
        for address in servers:
            assert places.get(address, 0) == len(on_servers[address]), (address, places)
        assert farm["retried"] == {} and farm["failed"] == 0
    said = " ".join(done.stderr.split())
    assert re.search(rf"farm: {PARTS + 1} compiles: ", said), done.stderr[-2000:]
    # No traffic left loopback: every client the servers saw was on 127.0.0.0/8.
    for address in servers:
        clients = re.findall(r"client: (\d+\.\d+\.\d+\.\d+):", server_log(address))
        assert clients and all(c.startswith("127.") for c in clients), set(clients)


def test_the_artifacts_are_those_of_a_local_build(
    farm_build: tuple[Path, Path, subprocess.CompletedProcess[str], dict[str, str]],
    tmp_path: Path,
) -> None:
    project, out, _, _ = farm_build
    local = tmp_path / "local"
    done = dockerarch("build", "wheel", "--package", str(project), "--arch", BUILD_ARCHES,
                      "--out", str(local), "--no-farm", "--no-ccache", timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for target in ARCHES:
        assert manifest(local, target)["farm"] is None
        farmed, here = wheel_files(out, target), wheel_files(local, target)
        assert sorted(farmed) == sorted(here)
        (so,) = [n for n in farmed if n.endswith(".so")]
        assert elf_shape(farmed[so]) == elf_shape(here[so]), target


def test_the_team_cache_comes_before_the_farm(servers: list[str], tmp_path: Path) -> None:
    """With --farm and a shared compiler cache: what no machine compiled goes to the farm (and
    into the cache); the same build on a fresh machine sends the farm nothing, every object a
    remote hit, and makes the same wheel."""
    (tmp_path / "registry.yaml").write_text(
        "compiler_cache: {url: 'http://127.0.0.1:3142/ccache/'}\n"
    )
    env = {"DOCKERARCH_REGISTRY_CONFIG": str(tmp_path / "registry.yaml")}
    project = write_project(tmp_path / "project", salt=random.randrange(1 << 30), funcs=8)

    def farmed(out: Path, *args: str) -> tuple[str, dict[str, list[str]]]:
        before = {a: server_log(a) for a in servers}
        done = dockerarch("build", "wheel", "--package", str(project), "--arch", "armv7", "--no-smoke",
                          "--out", str(out), "--farm", ",".join(servers), *args, env=env,
                          timeout=3600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        grown = {
            a: compiled(server_log(a)[len(before[a]) :], ARCHES["debian-armv7"]) for a in servers
        }
        return " ".join(done.stderr.split()), grown

    first, sent_to = farmed(tmp_path / "a")
    assert sum(len(files) for files in sent_to.values()) > 0, first[-2000:]
    assert re.search(r"shared compiler cache \S+: 0 local hits, 0 remote hits, [1-9]\d* compiled, "
                     r"[1-9]\d* objects sent", first), first[-2000:]  # fmt: skip
    again, sent_to = farmed(tmp_path / "b", "--no-cache")  # every local cache empty
    assert sent_to == {a: [] for a in servers}, sent_to  # the farm got nothing to compile
    found = re.search(
        r"shared compiler cache \S+: 0 local hits, (\d+) remote hits, 0 compiled", again
    )
    assert found and int(found.group(1)) >= PARTS + 1, again[-2000:]
    assert wheel_files(tmp_path / "b", "debian-armv7") == wheel_files(
        tmp_path / "a", "debian-armv7"
    )


def test_a_server_killed_mid_build_is_said_and_its_work_done_again(
    servers: list[str], tmp_path: Path
) -> None:
    victim = servers[1]
    project = write_project(tmp_path / "project", salt=random.randrange(1 << 30), funcs=120)
    base = len(compiled(server_log(victim), ARCHES["debian-armv7"]))
    out = tmp_path / "dist"
    build = subprocess.Popen(
        [sys.executable, "-m", "dockerarch", "build", "wheel", "--package", str(project),
         "--arch", "armv7", "--out", str(out), "--farm", ",".join(servers)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 900
        while len(compiled(server_log(victim), ARCHES["debian-armv7"])) <= base:
            assert build.poll() is None, "the build ended before the victim compiled anything"
            assert time.monotonic() < deadline
            time.sleep(0.2)
        name = "dockerarch-farm-" + victim.replace(":", "-")
        subprocess.run(["docker", "kill", name], capture_output=True, check=True)
        _, stderr = build.communicate(timeout=1800)
    finally:
        if build.poll() is None:
            build.kill()
    assert build.returncode == 0, stderr[-3000:]
    farm = manifest(out, "debian-armv7")["farm"]
    assert isinstance(farm, dict)
    # The killed server's compiles after its death were done again elsewhere, counted and said;
    # every compile is placed, and the wheel was verified and smoke-tested as always.
    assert farm["retried"].get(victim, 0) >= 1, farm
    assert sum(farm["places"].values()) == PARTS + 1, farm
    said = " ".join(stderr.split())
    assert re.search(rf"farm: {re.escape(victim)} failed \d+ compiles?, done again elsewhere", said)
    assert "smoke test passed" in said
    # The farm serves again from the same command.
    again = serve(victim)
    assert again.returncode == 0, again.stderr[-2000:]


def test_a_server_without_the_builds_toolchain_is_refused(
    farm_build: tuple[Path, Path, subprocess.CompletedProcess[str], dict[str, str]],
    tmp_path: Path,
) -> None:
    # sources no build compiled yet: ccache cannot answer for them, so were the server not
    # refused, distcc would be asked (the farm build's own project would be all ccache hits)
    project = write_project(tmp_path / "project", salt=random.randrange(1 << 30))
    other = f"127.0.0.4:{free_port('127.0.0.4')}"
    started = serve(other, arch="aarch64")  # no armv7 compiler
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        before = server_log(other)
        done = dockerarch("build", "wheel", "--package", str(project), "--arch", "armv7",
                          "--out", str(tmp_path / "dist"), "--farm", other, timeout=3600)  # fmt: skip
        after = server_log(other)
    finally:
        dockerarch("farm", "stop", other, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = " ".join(done.stderr.split())
    assert (
        f"farm server {other} left out: it answers, but has not got debian-armv7's toolchain"
        in said
    )
    assert "no farm server can take this build's compiles" in said
    assert compiled(after[len(before) :], ARCHES["debian-armv7"]) == []
    record = json.loads(
        (tmp_path / "dist" / "debian-armv7" / "farmdemo-1.0" / "manifest.json").read_text()
    )
    assert record["farm"] is None and record["hybrid"]["runs"] > 0  # compiled, here
    assert record["options"].get("MAX_JOBS", "2") == "2"  # the farm was not used: not raised


def test_bad_farm_input_is_a_clear_error(tmp_path: Path) -> None:
    done = dockerarch("build", "wheel", "--package", "zstandard==0.23.0", "--arch", "armv7",
                      "--farm", "not a host!", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is not a farm server" in done.stderr and "HOST[:PORT]" in done.stderr
    done = dockerarch("farm", "serve", "--arch", "armv7", "--listen", "127.0.0.5",
                      "--allow", "everyone")  # fmt: skip
    assert done.returncode == 2 and "--allow everyone is not an address or network" in " ".join(
        done.stderr.split()
    )
    done = dockerarch("farm", "stop", "127.0.0.9:1")
    assert done.returncode == 2 and "No farm server of this machine listens on" in done.stderr
