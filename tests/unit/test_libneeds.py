"""What the artifacts need besides Python: the ldd check's command, its output, and the packages
that ship what is missing."""

from __future__ import annotations

import json

import pytest

from dockerarch import libneeds
from dockerarch.artifacts import ArtifactReport, VerificationError


def report(name: str, kind: str, members: tuple[str, ...]) -> ArtifactReport:
    return ArtifactReport(name=name, sha256="0" * 64, size=1, kind=kind, elf_files=len(members),
                          glibc=None, glibcxx=None, elf_members=members)  # fmt: skip


def test_the_check_covers_every_elf_file_where_it_is_installed() -> None:
    """The emulated ldd's command and the native reading's files.json name the same files."""
    reports = [
        report("omp_demo-1.0-cp311-cp311-linux_armv7l.whl", "wheel",
               ("omp_demo/_omp.cpython-311-arm-linux-gnueabihf.so", "omp_demo-1.0.data/scripts/x")),
        report("tool-1.0.tar.gz", "tarball", ("./usr/local/lib/libtool.so.1",)),
    ]  # fmt: skip
    command = libneeds.check_command(reports)
    assert command is not None
    assert "/usr/local/lib/libtool.so.1" in command
    assert '[["omp-demo", "omp_demo/_omp.cpython-311-arm-linux-gnueabihf.so"]]' in command
    assert ".data/scripts" not in command  # a wheel's scripts are not loaded by Python
    assert "ldd" in command and "not found" in command
    assert '| xargs -r -P "$(nproc)" -I FILE sh -c' in command  # on every core
    files = libneeds.native_files(reports)
    assert files is not None
    assert json.loads(files) == {
        "wheels": [["omp-demo", "omp_demo/_omp.cpython-311-arm-linux-gnueabihf.so"]],
        "paths": ["/usr/local/lib/libtool.so.1"],
    }
    pure = [report("pure-1.0-py3-none-any.whl", "wheel", ())]
    assert libneeds.check_command(pure) is None and libneeds.native_files(pure) is None


def test_missing_libraries_are_read_and_mapped_to_the_packages_that_ship_them() -> None:
    output = (
        "\tlibc.so.6 => /lib/arm-linux-gnueabihf/libc.so.6 (0x3f66d000)\n"
        "dockerarch-needs: /usr/local/lib/python3.11/dist-packages/omp_demo/_omp.so libgomp.so.1\n"
        "dockerarch-needs: /usr/local/lib/libtool.so.1 libgomp.so.1\n"
    )
    missing = libneeds.parse(output, [])
    assert [m.soname for m in missing] == ["libgomp.so.1", "libgomp.so.1"]
    assert missing[0].path.endswith("omp_demo/_omp.so")
    table = "libgomp.so.1\tlibgomp1\nlibgomp.so\tlibgcc-12-dev\nlibz.so.1\tzlib1g\n"
    assert libneeds.packages_for(missing, table, "debian-armv7") == ["libgomp1"]


def test_a_library_no_package_ships_is_a_verification_failure_naming_it() -> None:
    missing = libneeds.parse("dockerarch-needs: /usr/lib/x/_ext.so libvendor.so.3\n", [])
    with pytest.raises(VerificationError, match=r"_ext\.so needs libvendor\.so\.3.*debian-armv7"):
        libneeds.packages_for(missing, "libz.so.1\tzlib1g\n", "debian-armv7")


@pytest.mark.parametrize("package", ["-oAPT::Get::AllowUnauthenticated=true", "Zlib1g", "x",
                                     "zlib1g evil", "../../etc/passwd"])  # fmt: skip
def test_a_package_table_entry_that_is_no_package_name_is_refused_not_installed(
    package: str,
) -> None:
    # The table is a file of the build stage, which the package's own build could write over;
    # what it names reaches the runtime image's apt-get as arguments.
    missing = libneeds.parse("dockerarch-needs: /usr/lib/x/_ext.so libz.so.1\n", [])
    with pytest.raises(VerificationError, match=r"not a Debian package name") as raised:
        libneeds.packages_for(missing, f"libz.so.1\t{package}\n", "debian-armv7")
    assert "libz.so.1" in str(raised.value) and "_ext.so" in str(raised.value)
    assert libneeds.packages_for(missing, "libz.so.1\tzlib1g\n", "debian-armv7") == ["zlib1g"]
    assert libneeds.packages_for(missing, "libz.so.1\tlibstdc++6\n", "x") == ["libstdc++6"]


def test_a_library_another_wheel_carries_is_not_missing_but_one_of_its_own_is_a_broken_rpath() -> (
    None
):
    site = "/usr/local/lib/python3.13/dist-packages"
    ext = report("qpu_dot-1.0-cp313-cp313-linux_armv7l.whl", "wheel", ("qpu_dot.so",))
    line = f"dockerarch-needs-wheel: {site}/qpu_dot.so libc10.so {site}/torch/lib/libc10.so\n"
    assert libneeds.parse(line, [ext]) == []  # `import torch` loads it first
    torch = report("torch-2.6.0-cp313-cp313-linux_armv7l.whl", "wheel",
                   ("torch/_C.so", "torch/lib/libtorch_python.so", "torch/lib/libtorch.so.2.6"))  # fmt: skip
    line = (f"dockerarch-needs-wheel: {site}/torch/lib/libtorch_python.so libtorch.so.2.6 "
            f"{site}/torch/lib/libtorch.so.2.6\n")  # fmt: skip
    with pytest.raises(
        VerificationError, match=r"libtorch_python\.so needs libtorch\.so\.2\.6.*RPATH"
    ):
        libneeds.parse(line, [torch])


def test_auditwheel_s_vendored_libraries_find_their_siblings() -> None:
    """A manylinux wheel's <name>.libs/ libraries need each other by their mangled names; the
    extension that loads them has the directory in its RPATH, so that is not a broken RPATH."""
    from dockerarch.artifacts import ArtifactReport

    libs = "/usr/local/lib/python3.11/dist-packages/opencv_python_headless.libs"
    report = ArtifactReport(
        name="opencv_python_headless-4.10.0.84-cp37-abi3-manylinux_2_17_x86_64.whl", sha256="0",
        size=1, kind="wheel", elf_files=2, glibc=None, glibcxx=None,
        elf_members=("opencv_python_headless.libs/libavformat-3ff1be5b.so.59.27.100",
                     "opencv_python_headless.libs/libavcodec-9aae324f.so.59.37.100"),
    )  # fmt: skip
    output = (f"dockerarch-needs-wheel: {libs}/libavformat-3ff1be5b.so.59.27.100 "
              f"libavcodec-9aae324f.so.59.37.100 {libs}/libavcodec-9aae324f.so.59.37.100\n")  # fmt: skip
    assert libneeds.parse(output, [report]) == []
