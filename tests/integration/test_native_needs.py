"""Proof that the native reading of the libraries installed artifacts need (the `needs` stage of a
hybrid build: data/toolchain/dockerarch_needs.py run by the toolchain image's x86-64 Python)
answers as the target's own ldd does under QEMU: in real runtime images of both arches, with
libraries taken away so that there is something to miss, over the C/C++ extension's wheel and
every ELF file of the image's Python and its multiarch library directory. (The two answers
were equal in their first run here, but for the extension itself: with libz taken away, the
ldd route's python3 could not say where the wheel's files were.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockerarch import artifacts, libneeds, paths
from dockerarch.targets import load_targets

ARCHES = {"debian-armv7": "arm-linux-gnueabihf", "debian-aarch64": "aarch64-linux-gnu"}
# taken away: what the C++ extension needs (libstdc++), what Python's ctypes, sqlite3 and bz2
# modules need (libffi, libsqlite3, libbz2), and what nothing here needs (libgomp, absent
# anyway). Not libz or libexpat: python3 itself needs them, and the ldd route asks python3
# where the wheel's files are.
TAKEN = ("libstdc++.so.6", "libffi.so.8", "libsqlite3.so.0", "libbz2.so.1.0", "libgomp.so.1")


def run(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module", params=sorted(ARCHES))
def broken(request: pytest.FixtureRequest, cext_dist: Path) -> Iterator[tuple[str, dict[str, object]]]:  # fmt: skip
    """The extension's runtime image with TAKEN removed, committed under a tag of this run."""
    target = str(request.param)
    result = cext_dist / target / "dockerarch_tinyext-1.0.0"
    manifest = json.loads((result / "manifest.json").read_text())
    platform = load_targets()[target].platform
    multiarch = ARCHES[target]
    name = f"dockerarch-test-needs-{uuid.uuid4().hex[:8]}"
    removed = " ".join(f"/usr/lib/{multiarch}/{so}*" for so in TAKEN)
    made = run(["docker", "run", "--platform", platform, "--name", name, manifest["image"]["tag"],
                "sh", "-c", f"rm -f {removed}"])  # fmt: skip
    assert made.returncode == 0, made.stderr
    tag = f"dockerarch/test-needs:{name}"
    committed = run(["docker", "commit", name, tag])
    run(["docker", "rm", name])
    assert committed.returncode == 0, committed.stderr
    yield (
        target,
        {**manifest, "broken": tag, "platform": platform, "wheels": sorted(result.glob("*.whl"))},
    )
    run(["docker", "rmi", tag])


def files_to_check(image: str, platform: str, multiarch: str) -> list[str]:
    listed = run(["docker", "run", "--rm", "--platform", platform, image, "sh", "-c",
                  f"find /usr/lib/{multiarch} /usr/lib/python3.11/lib-dynload -maxdepth 1 "
                  "-type f -name '*.so*'; echo /usr/bin/python3.11"])  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    return sorted(listed.stdout.split())


def test_the_native_reading_misses_exactly_what_the_target_s_ldd_misses(
    broken: tuple[str, dict[str, object]], tmp_path: Path
) -> None:
    target, manifest = broken
    image, platform = str(manifest["broken"]), str(manifest["platform"])
    wheels = manifest["wheels"]
    assert isinstance(wheels, list) and wheels
    reports = [artifacts.verify(wheel, load_targets()[target]) for wheel in wheels]
    system = files_to_check(image, platform, ARCHES[target])
    reports.append(artifacts.ArtifactReport(
        name="system.tar.gz", sha256="0" * 64, size=1, kind="tarball", elf_files=len(system),
        glibc=None, glibcxx=None, elf_members=tuple(p.lstrip("/") for p in system)))  # fmt: skip

    # the target's ldd, under QEMU (what a plain QEMU build and the fallback run)
    command = libneeds.check_command(reports)
    assert command is not None
    emulated = run(["docker", "run", "--rm", "--network", "none", "--platform", platform, image,
                    "sh", "-c", command])  # fmt: skip
    assert emulated.returncode == 0, emulated.stderr
    by_ldd = {(m.path, m.soname) for m in libneeds.parse(emulated.stdout, reports)}

    # the native reading, in the same image, as the layout's `needs` stage runs it
    context = tmp_path / "context"
    shutil.copytree(paths.data_path("toolchain"), context / "toolchain")
    (context / "files").mkdir()
    (context / "files" / "files.json").write_text(libneeds.native_files(reports) or "")
    (context / "Dockerfile").write_text(
        f"FROM --platform=linux/amd64 {manifest['toolchain_image']} AS native\n"
        f"FROM {image} AS checked\n"
        "RUN --network=none --mount=type=bind,from=native,target=/run/dockerarch-native \\\n"
        "    --mount=type=bind,source=toolchain,target=/run/dockerarch \\\n"
        "    --mount=type=bind,source=files,target=/run/dockerarch-needs \\\n"
        "    sh /run/dockerarch/native-needs /run/dockerarch-native "
        "/run/dockerarch-needs/files.json > /needs.txt\n"
        "FROM scratch\nCOPY --from=checked /needs.txt /\n"
    )
    built = run(["docker", "buildx", "build", "--platform", platform, "--output",
                 f"type=local,dest={tmp_path / 'out'}", str(context)])  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    output = (tmp_path / "out" / "needs.txt").read_text()
    assert libneeds.undecided(output) is None, output
    natively = {(m.path, m.soname) for m in libneeds.parse(output, reports)}

    assert natively == by_ldd
    missed = {soname for _, soname in natively}
    assert {"libstdc++.so.6", "libffi.so.8", "libsqlite3.so.0"} <= missed  # something to miss
    assert len(system) > 30  # and many real files to read
    ext = [
        path for path, soname in natively if soname == "libstdc++.so.6" and "dist-packages" in path
    ]
    assert ext, natively  # the C++ extension, located where the wheel installed it
