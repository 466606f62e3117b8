"""SD-card image handling that needs no process: decompression, partition choice, and what a
root filesystem archive holds."""

from __future__ import annotations

import gzip
import io
import lzma
import tarfile
import zipfile
from pathlib import Path

import pytest

from dockerarch import arm_probe, elf, sdcard
from dockerarch.errors import UsageError

MiB = 1 << 20


def _collect(lines: list[str]) -> sdcard.Progress:
    return lines.append


def _disk(size: int = 3 * MiB) -> bytes:
    data = bytearray(size)
    data[510:512] = b"\x55\xaa"
    data[2 * MiB : 2 * MiB + 5] = b"data!"
    return bytes(data)


@pytest.mark.parametrize("kind", ["zip", "xz", "gz"])
def test_compressed_images_are_decompressed_sparsely(kind: str, tmp_path: Path) -> None:
    raw = _disk()
    packed = tmp_path / f"board.img.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(packed, "w") as archive:
            archive.writestr("README.txt", "hello")
            archive.writestr("board.img", raw)
    elif kind == "xz":
        packed.write_bytes(lzma.compress(raw))
    else:
        packed.write_bytes(gzip.compress(raw))
    lines: list[str] = []
    with sdcard.raw_image(packed, tmp_path, _collect(lines)) as image:
        assert image.read_bytes() == raw
        assert image.stat().st_blocks * 512 < len(raw)  # zero blocks were skipped, not written
    assert lines[0] == f"decompressing board.img.{kind}"


def test_a_raw_image_is_used_in_place(tmp_path: Path) -> None:
    raw = tmp_path / "board.img"
    raw.write_bytes(_disk())
    with sdcard.raw_image(raw, tmp_path, _collect([])) as image:
        assert image == raw


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("cut.img.xz", lzma.compress(_disk())[:-200], "is truncated or corrupt"),
        ("cut.img.gz", gzip.compress(_disk())[:-200], "is truncated or corrupt"),
        ("bad.img.zip", b"PK\x03\x04" + b"\x00" * 100, "is truncated or corrupt"),
    ],
)
def test_broken_archives_are_called_corrupt(
    name: str, content: bytes, message: str, tmp_path: Path
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message), sdcard.raw_image(path, tmp_path, _collect([])):
        pass
    assert not (tmp_path / "image.img").exists()


def test_a_zip_without_exactly_one_image_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "two.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.img", b"1")
        archive.writestr("b.img", b"2")
    with (
        pytest.raises(UsageError, match=r"exactly one \.img file; it holds a\.img, b\.img"),
        sdcard.raw_image(path, tmp_path, _collect([])),
    ):
        pass


def _part(number: int, size_mb: int, fstype: str | None, type_: str = "83") -> sdcard.Partition:
    return sdcard.Partition(number=number, start=number * MiB, size=size_mb * MiB, type=type_,
                            fstype=fstype)  # fmt: skip


def test_the_largest_linux_partition_is_the_root() -> None:
    parts = [_part(1, 256, "vfat", "C"), _part(2, 4000, "ext4"), _part(3, 100, "ext4")]
    assert sdcard.root_partition(parts, Path("x.img"), None).number == 2
    assert sdcard.root_partition(parts, Path("x.img"), 3).number == 3


def test_partition_choice_errors_list_the_partitions() -> None:
    parts = [_part(1, 256, "vfat", "C"), _part(2, 4000, "ext4")]
    with pytest.raises(UsageError, match="holds vfat, not a Linux root") as err:
        sdcard.root_partition(parts, Path("x.img"), 1)
    assert "partition 2: type 83, ext4, 4194 MB" in str(err.value)
    with pytest.raises(UsageError, match=r"x\.img has no partition 7"):
        sdcard.root_partition(parts, Path("x.img"), 7)
    with pytest.raises(UsageError, match="has no Linux root partition"):
        sdcard.root_partition([_part(1, 256, "vfat", "C")], Path("x.img"), None)
    with pytest.raises(UsageError, match="truncated or corrupt: its Linux partition holds no"):
        sdcard.root_partition([_part(1, 256, "vfat", "C"), _part(2, 9, None)], Path("x.img"), None)


def _rootfs_tar(path: Path, program: bytes, os_release: str) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in (
            ("./usr/bin/env", program),
            ("./usr/lib/os-release", os_release.encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("./etc/os-release")
        link.type, link.linkname = tarfile.SYMTYPE, "../usr/lib/os-release"
        tar.addfile(link)
    return path


@pytest.mark.parametrize("arch", ["armv7", "aarch64"])
def test_rootfs_arch_and_distro_come_from_its_files(arch: str, tmp_path: Path) -> None:
    archive = _rootfs_tar(tmp_path / "rootfs.tar", arm_probe.probe_executable(arch),
                          'ID=debian\nPRETTY_NAME="PYNQ Linux, based on Ubuntu 22.04"\n')  # fmt: skip
    facts = sdcard.inspect_rootfs(archive, Path("board.img"))
    assert (facts.arch, facts.evidence) == (arch, "usr/bin/env")
    assert facts.pretty_name == "PYNQ Linux, based on Ubuntu 22.04"


def test_soft_float_arm_userland_is_not_armv7(tmp_path: Path) -> None:
    program = bytearray(arm_probe.probe_executable("armv7"))
    program[36:40] = (0x05000200).to_bytes(4, "little")  # EABI5, soft-float: armel
    facts = sdcard.inspect_rootfs(
        _rootfs_tar(tmp_path / "r.tar", bytes(program), ""), Path("b.img")
    )
    assert facts.arch is None and "armel" in facts.machine


def test_a_rootfs_without_programs_is_refused(tmp_path: Path) -> None:
    archive = _rootfs_tar(tmp_path / "rootfs.tar", b"#!/bin/sh\n", "")
    with pytest.raises(UsageError, match="holds no Debian-family userland"):
        sdcard.inspect_rootfs(archive, Path("board.img"))


def test_elf_facts_of_the_probes() -> None:
    arm = elf.read_facts(io.BytesIO(arm_probe.probe_executable("armv7")))
    assert (arm.machine, arm.arch, arm.elf_class, arm.hard_float) == ("EM_ARM", "armv7", 32, True)
    a64 = elf.read_facts(io.BytesIO(arm_probe.probe_executable("aarch64")))
    assert (a64.machine, a64.arch, a64.elf_class, a64.hard_float) == (
        "EM_AARCH64",
        "aarch64",
        64,
        None,
    )
    assert a64.highest("GLIBC") is None  # static: needs nothing


def test_elf_symbol_versions_of_a_host_program() -> None:
    with open("/usr/bin/env", "rb") as handle:
        facts = elf.read_facts(handle)
    assert facts.arch == "amd64"
    highest = facts.highest("GLIBC")
    assert highest is not None and (2, 2) <= highest < (3,)


def test_garbage_is_not_elf() -> None:
    with pytest.raises(ValueError, match="not a well-formed ELF file"):
        elf.read_facts(io.BytesIO(b"\x7fELF" + b"\xff" * 60))
