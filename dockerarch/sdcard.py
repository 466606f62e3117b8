"""Board SD-card images: find the Linux root partition and archive it, read-only.

A board's SD-card image (PYNQ ships ``.img`` inside a ``.zip``, Raspberry Pi OS ``.img.xz``) holds
the exact userland of the board. This module decompresses it (sparsely) when needed, reads its
MBR or GPT partition table with ``sfdisk --json``, and archives the root partition with GNU tar,
keeping owners, modes, hardlinks, fifos, xattrs and file capabilities.

No mount and no loop device may outlive a run, whatever ends it (pi-gen#244). The partition is
mounted by ``mount -o ro,loop`` inside a private mount namespace (``unshare --mount``): the
mount exists only in that namespace, which the kernel tears down when its last process exits,
even on SIGKILL; and a loop device made by ``mount`` is auto-clearing, so it detaches when that
mount goes. The loop device is read-only and ext* journals are not replayed (``noload``), so the
image file is never written to.
"""

from __future__ import annotations

import functools
import gzip
import json
import lzma
import os
import shlex
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dockerarch import process
from dockerarch.errors import CommandFailedError, UsageError

SECTOR = 512
CHUNK = 1 << 20
# Partition types that hold a Linux filesystem: MBR "83", GPT "Linux filesystem" and the
# Discoverable Partitions Specification's root partition types.
MBR_LINUX = {"83"}
GPT_LINUX = {
    "0FC63DAF-8483-4772-8E79-3D69D8477DE4": "Linux filesystem",
    "69DAD710-2CE4-4E3C-B16C-21A1D49ABED3": "Linux root (ARM 32-bit)",
    "B921B045-1DF0-41C3-AF44-4C6F280D3FAE": "Linux root (ARM 64-bit)",
    "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709": "Linux root (x86-64)",
}
LINUX_FILESYSTEMS = ("ext4", "ext3", "ext2", "btrfs", "xfs", "f2fs", "squashfs", "erofs")
TAR_XATTRS = ("--xattrs", "--xattrs-include=*", "--acls", "--numeric-owner")

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Partition:
    number: int  # 1-based, as the kernel names it; 0 for an image holding one bare filesystem
    start: int  # bytes
    size: int  # bytes
    type: str
    fstype: str | None

    @property
    def linux(self) -> bool:
        return self.fstype in LINUX_FILESYSTEMS


def _not_an_image(path: Path, why: str) -> UsageError:
    return UsageError(
        f"{path} is not a disk image: {why}",
        fix="Give the board's SD-card image: a .img file, or the .img.zip/.img.xz/.img.gz it "
        "was downloaded as.",
    )


def _corrupt(path: Path, why: str) -> UsageError:
    return UsageError(
        f"{path} is truncated or corrupt: {why}",
        fix="Download it again and compare its checksum with the one its publisher gives.",
    )


@contextmanager
def raw_image(path: Path, workdir: Path, progress: Progress) -> Iterator[Path]:
    """The raw disk image behind ``path``: the file itself, or a sparse copy decompressed into
    ``workdir`` (zip, xz and gzip are recognised by their magic bytes, not their names)."""
    with path.open("rb") as handle:
        magic = handle.read(6)
    opener: Callable[[], BinaryIO] | None = None
    if magic.startswith(b"PK\x03\x04"):
        opener = functools.partial(_zip_member, path)
    elif magic.startswith(b"\xfd7zXZ\x00"):
        opener = functools.partial(lzma.open, path)  # type: ignore[assignment]
    elif magic.startswith(b"\x1f\x8b"):
        opener = functools.partial(gzip.open, path)  # type: ignore[assignment]
    if opener is None:
        yield path
        return
    out = workdir / "image.img"
    progress(f"decompressing {path.name}")
    started = time.monotonic()
    try:
        with opener() as source, out.open("wb") as sink:
            written = _copy_sparse(source, sink)
    except (zipfile.BadZipFile, lzma.LZMAError, gzip.BadGzipFile, zlib.error, EOFError) as exc:
        out.unlink(missing_ok=True)
        raise _corrupt(path, str(exc) or type(exc).__name__) from exc
    progress(f"decompressed {written / 1e9:.2f} GB in {time.monotonic() - started:.0f} s")
    yield out


def _zip_member(path: Path) -> BinaryIO:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise _corrupt(path, str(exc)) from exc
    images = [i for i in archive.infolist() if i.filename.lower().endswith(".img")]
    if len(images) != 1:
        names = ", ".join(i.filename for i in archive.infolist()[:5]) or "nothing"
        archive.close()
        raise _not_an_image(
            path, f"a zip archive should hold exactly one .img file; it holds {names}"
        )
    return archive.open(images[0])  # type: ignore[return-value]


def _copy_sparse(source: BinaryIO, sink: BinaryIO) -> int:
    """Copy, seeking over all-zero blocks so an 8 GB image of 3 GB data takes 3 GB of disk."""
    total = 0
    zero = bytes(CHUNK)
    while block := source.read(CHUNK):
        if block == zero[: len(block)]:
            sink.seek(len(block), os.SEEK_CUR)
        else:
            sink.write(block)
        total += len(block)
    sink.truncate(total)
    return total


def partitions(image: Path, original: Path) -> list[Partition]:
    """The image's partitions with the filesystem each holds; a bare filesystem image is one
    partition numbered 0."""
    size = image.stat().st_size
    if size < 64 * 1024:
        raise _not_an_image(original, f"it is only {size} bytes long")
    table = process.run(["sfdisk", "--json", str(image)], check=False, timeout=60)
    data = json.loads(table.stdout)["partitiontable"] if table.returncode == 0 else {}
    if not data.get("partitions"):
        # No table, or an empty one (a FAT boot sector looks like an MBR): a bare filesystem?
        fstype = _probe(image, 0, size)
        if fstype is None:
            raise _not_an_image(original, "it has no MBR or GPT partition table and no filesystem")
        return [Partition(number=0, start=0, size=size, type="none", fstype=fstype)]
    sector = int(data.get("sectorsize", SECTOR))
    found = []
    for number, entry in enumerate(data.get("partitions", []), start=1):
        start, length = int(entry["start"]) * sector, int(entry["size"]) * sector
        if start + length > size:
            raise _corrupt(
                original,
                f"partition {number} ends at byte {start + length}, past the image's end "
                f"({size} bytes)",
            )
        found.append(
            Partition(
                number=number, start=start, size=length, type=str(entry.get("type", "")).upper(),
                fstype=_probe(image, start, length),
            )
        )  # fmt: skip
    return found


def _probe(image: Path, offset: int, size: int) -> str | None:
    """The filesystem type blkid finds at ``offset``, or None."""
    probe = process.run(
        ["blkid", "--probe", "--offset", str(offset), "--size", str(size), "--match-tag", "TYPE",
         "--output", "value", str(image)],
        check=False, timeout=60,
    )  # fmt: skip
    return probe.stdout.strip() or None if probe.returncode == 0 else None


def root_partition(parts: list[Partition], original: Path, choose: int | None) -> Partition:
    """The partition to import: ``choose``, else the largest one holding a Linux filesystem."""
    listing = "; ".join(
        (f"partition {p.number}: type {p.type}, " if p.number else "the whole file: ")
        + f"{p.fstype or 'no filesystem'}, {p.size / 1e6:.0f} MB"
        for p in parts
    )
    if choose is not None:
        for part in parts:
            if part.number == choose:
                if not part.linux:
                    raise UsageError(
                        f"Partition {choose} of {original} holds {part.fstype or 'no filesystem'}"
                        ", not a Linux root filesystem",
                        fix=f"Pick another with --partition ({listing}).",
                    )
                return part
        raise UsageError(
            f"{original} has no partition {choose}", fix=f"Its partitions: {listing or 'none'}."
        )
    linux = [p for p in parts if p.linux]
    if not linux:
        if any(p.type in MBR_LINUX | set(GPT_LINUX) for p in parts):
            raise _corrupt(
                original, f"its Linux partition holds no readable filesystem ({listing})"
            )
        raise UsageError(
            f"{original} has no Linux root partition ({listing or 'no partitions'})",
            fix="Give the image of a Linux board (its root is an ext4 partition, type 83 in MBR "
            "or Linux filesystem in GPT).",
        )
    return max(linux, key=lambda p: p.size)


def archive_partition(image: Path, part: Partition, out: Path, original: Path) -> None:
    """Write the partition's files to the tar ``out``; the mount lives and dies in a private
    mount namespace, and every loop device this made is gone when this returns or raises."""
    for tool, package in (("unshare", "util-linux"), ("mount", "mount"), ("tar", "tar")):
        process.which(tool, hint=f"Install {package} (scripts/setup-host does).")
    options = ["ro", "loop", f"offset={part.start}", f"sizelimit={part.size}"]
    if part.fstype in ("ext3", "ext4"):
        options.append("noload")  # never replay a journal: the image stays untouched
    mountpoint = out.parent / "mnt"
    mountpoint.mkdir()
    script = (
        "set -e; "
        f"mount -t {shlex.quote(str(part.fstype))} -o {','.join(options)} "
        f"{shlex.quote(str(image))} {shlex.quote(str(mountpoint))}; "
        f"tar --create --file={shlex.quote(str(out))} {' '.join(TAR_XATTRS)} --sparse "
        f"--exclude=./lost+found -C {shlex.quote(str(mountpoint))} ."
    )
    before = _loop_devices(image)
    try:
        process.stream(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            on_line=lambda line: None, keep=20, new_session=True,
        )  # fmt: skip
    except CommandFailedError as exc:
        out.unlink(missing_ok=True)
        tail = " / ".join(exc.output.strip().splitlines()[-4:])
        if "mount" in tail or "superblock" in tail:
            raise _corrupt(
                original, f"partition {part.number} ({part.fstype}) does not mount: {tail}"
            ) from exc
        raise CommandFailedError(
            f"Reading partition {part.number} of {original} failed: {tail}",
            fix="Check the image is intact; run with --debug to see the command.",
        ) from exc
    finally:
        _wait_loop_devices_gone(image, before)


def _loop_devices(image: Path) -> set[str]:
    listed = process.run(["losetup", "--noheadings", "--output", "NAME", "--associated",
                          str(image)], check=False, timeout=30)  # fmt: skip
    return set(listed.stdout.split())


def _wait_loop_devices_gone(image: Path, before: set[str], timeout: float = 20.0) -> None:
    """The kernel detaches an auto-clearing loop device shortly after its mount namespace goes;
    wait for that, and detach any of ours still there after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (ours := _loop_devices(image) - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    for device in sorted(ours):
        process.run(["losetup", "--detach", device], check=False, timeout=30)


@dataclass(frozen=True, kw_only=True)
class RootfsFacts:
    pretty_name: str  # PRETTY_NAME of os-release
    machine: str  # e_machine of its programs
    arch: str | None  # the dockerarch arch that machine belongs to
    evidence: str  # the file the machine was read from
    newest: int = 0  # the newest modification time in it (seconds): its SOURCE_DATE_EPOCH


# Regular files (not links) present in every Debian-family userland, merged /usr or not.
_PROBES = ("./usr/bin/env", "./usr/bin/dpkg", "./bin/ls", "./usr/bin/ls")
_OS_RELEASE = ("./etc/os-release", "./usr/lib/os-release")


def inspect_rootfs(archive: Path, original: Path) -> RootfsFacts:
    """Which distro and which arch the archived root filesystem holds."""
    import tarfile

    from dockerarch import elf

    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        newest = int(max((m.mtime for m in members.values()), default=0))
        pretty = "an unknown Linux"
        for name in _OS_RELEASE:
            member = members.get(name)
            if member is not None and member.issym():
                target = os.path.normpath(os.path.join(os.path.dirname(name), member.linkname))
                member = members.get("./" + target.lstrip("./"))
            if member is not None and member.isfile():
                text = tar.extractfile(member).read().decode("utf-8", "replace")  # type: ignore[union-attr]
                for line in text.splitlines():
                    if line.startswith("PRETTY_NAME="):
                        pretty = line.split("=", 1)[1].strip().strip('"')
                break
        for name in _PROBES:
            member = members.get(name)
            if member is None or not member.isfile():
                continue
            handle = tar.extractfile(member)
            assert handle is not None
            try:
                facts = elf.read_facts(handle)  # type: ignore[arg-type]
            except ValueError:
                continue
            if facts.machine == "EM_ARM" and not facts.hard_float:
                # armel: every armv7 target (Debian armhf, Raspbian) uses the hard-float ABI
                return RootfsFacts(pretty_name=pretty, machine="soft-float ARM (armel)",
                                   arch=None, evidence=name[2:], newest=newest)  # fmt: skip
            return RootfsFacts(pretty_name=pretty, machine=facts.machine, arch=facts.arch,
                               evidence=name[2:], newest=newest)  # fmt: skip
    raise UsageError(
        f"The root partition of {original} holds no Debian-family userland (none of "
        f"{', '.join(p[2:] for p in _PROBES)} is a program)",
        fix="Pick the partition holding / with --partition.",
    )
