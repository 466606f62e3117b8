"""`--source PATH`: a recipe that clones from git builds from a tree or an archive on this
machine instead, with no network for its source. The test writes a small stand-in for QPULib
(its file layout, every source file the recipe's Makefile compiles) and builds the qpulib recipe
from it, as a directory and as a .tar.gz release archive."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from .conftest import REPO, dockerarch

OBJECTS = [line for line in (REPO / "contexts/qpulib/Makefile.libqpu").read_text().split("OBJ = ", 1)[1]
           .split("\n\n", 1)[0].replace("\\", " ").split()]  # fmt: skip


def write_tree(root: Path) -> Path:
    lib = root / "Lib"
    lib.mkdir(parents=True)
    (lib / "QPULib.h").write_text("#pragma once\nint qpulib_parts();\n")
    for number, obj in enumerate(OBJECTS):
        source = lib / obj.replace(".o", ".cpp")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f'#include "QPULib.h"\nint part_{number}() {{ return {number}; }}\n')
    parts = len(OBJECTS)
    (lib / "Kernel.cpp").write_text(
        f'#include "QPULib.h"\nint qpulib_parts() {{ return {parts}; }}\n'
    )
    (root / "Tests").mkdir()
    # The example the recipe links against the emulator library and its smoke test runs.
    (root / "Tests/GCD.cpp").write_text(
        '#include <stdio.h>\n#include "QPULib.h"\n'
        "static int g(int a, int b) { while (b) { int t = b; b = a % b; a = t; } return a; }\n"
        'int main() { for (int i = 0; i < 16; i++) printf("gcd(%i, %i) = %i\\n", 100 + 7 * i, '
        f"60 + 3 * i, g(100 + 7 * i, 60 + 3 * i)); return qpulib_parts() == {parts} ? 0 : 1; }}\n"
    )
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tree(tmp_path_factory.mktemp("qpulib-src") / "QPULib")


def test_qpulib_builds_from_a_local_tree(tree: Path, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    "commit", "-qm", "stand-in", "--allow-empty"], check=True)  # fmt: skip
    subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    "commit", "-qm", "tree"], check=True)  # fmt: skip
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    done = dockerarch("build", "qpulib", "--target", "debian-armv7", "--source", str(tree),
                      "--set", "QPU=0", "--out", str(tmp_path), timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = tmp_path / "debian-armv7" / "qpulib-master"
    data = json.loads((result / "manifest.json").read_text())
    assert data["source"] == {"path": str(tree), "kind": "directory", "commit": commit}
    (artifact,) = data["artifacts"]
    assert artifact["elf_files"] == 3  # libqpu.so, libqpu-emu.so, gcd-emu: armv7 hard-float code
    with tarfile.open(result / "qpulib-master-armhf.tar.gz") as packed:
        names = packed.getnames()
    assert "./usr/local/lib/libqpu.so" in names and "./usr/local/include/QPULib/QPULib.h" in names
    assert "git clone" not in (result / "build.log").read_text()
    assert data["smoke"] == "16 gcds right, e.g. gcd(205, 105) = 5"


def test_qpulib_builds_from_a_release_archive(tree: Path, tmp_path: Path) -> None:
    archive = tmp_path / "QPULib-master.tar.gz"
    with tarfile.open(archive, "w:gz") as packed:
        packed.add(tree, arcname="QPULib-master", filter=lambda i: None if "/.git" in i.name else i)
    done = dockerarch("build", "qpulib", "--target", "debian-armv7", "--source", str(archive),
                      "--set", "QPU=0", "--out", str(tmp_path / "out"), timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "out/debian-armv7/qpulib-master/manifest.json").read_text())
    assert data["source"] == {"path": str(archive), "kind": "archive",
                              "sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}  # fmt: skip


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: p, "holds no Lib/QPULib.h at its root"),
        (lambda p: (p / "notes.txt").write_text("x") and p / "notes.txt", "neither a directory nor an archive"),
    ],
)  # fmt: skip
def test_bad_sources_fail_before_anything_is_built(make, message: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    done = dockerarch("build", "qpulib", "--target", "debian-armv7", "--source", str(make(tmp_path)),
                      "--out", str(tmp_path / "out"))  # fmt: skip
    assert done.returncode == 2 and message in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "out").exists()
