"""A vendor's SD-card image as a card's boot source (``--boot-from``): PYNQ's (BOOT.BIN, image.ub,
boot.scr from petalinux) and Raspberry Pi OS's boot partitions cannot be made from Debian's
packages, so the card takes the vendor's boot partition byte for byte, and its kernel's modules
and firmware from the vendor's root (debugfs's rdump: nothing mounted), checked first: an image
that is no board image, is truncated, or whose kernel is for another arch is a user error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dockerarch import process, sdcard
from dockerarch.card.boards import Board
from dockerarch.elf import is_elf, read_facts
from dockerarch.errors import UsageError
from dockerarch.files import sha256_file
from dockerarch.targets import BoardTarget

Say = Callable[[str], None]
FAT = ("vfat", "msdos")
_RELEASE = re.compile(r"^[0-9][A-Za-z0-9._+-]*$")


@dataclass
class VendorBoot:
    source: Path
    source_sha256: str
    boot: Path  # the vendor's boot partition, its bytes
    boot_sha256: str
    boot_type: str  # its MBR partition type, kept
    files: list[str] = field(default_factory=list)  # what its FAT holds
    kernel_release: str | None = None
    tree: Path | None = None  # usr/lib/modules/RELEASE and usr/lib/firmware, to go on the card
    disk_id: str | None = None  # the vendor's MBR disk signature: its cmdline may name PARTUUIDs


def read(path: Path, board: Board, target: BoardTarget, work: Path, say: Say) -> VendorBoot:
    """The boot partition and the kernel's modules of the vendor image ``path`` (zip, xz or gz
    compressed, or raw), into ``work``."""
    if not path.is_file():
        raise UsageError(f"--boot-from {path}: no such file",
                         fix=f"Give the vendor's SD-card image of a {board.name} (.img, .img.xz or .zip).")  # fmt: skip
    source_sha256 = sha256_file(path)
    say(f"reading the vendor's image {path.name} (sha256 {source_sha256[:12]})")
    with sdcard.raw_image(path, work, say) as raw:
        parts = sdcard.partitions(raw, path)
        fat = [p for p in parts if p.fstype in FAT and p.number]
        if not fat:
            raise UsageError(f"--boot-from {path} has no FAT boot partition, so it is not a "
                             "board's SD-card image", fix=_fix(board))  # fmt: skip
        boot_part = fat[0]
        boot = work / "vendor-boot.fat"
        _copy_range(raw, boot_part.start, boot_part.size, boot)
        listing = process.run(["mdir", "-b", "-i", str(boot), "::"], timeout=60, check=False)
        files = sorted(
            line.removeprefix("::/") for line in listing.stdout.split() if line.startswith("::/")
        )
        missing = [name for name in board.vendor_files if not _has(files, name)]
        if missing:
            raise UsageError(
                f"--boot-from {path}: its boot partition lacks {', '.join(missing)}, so it is "
                f"not a {board.name} image (it holds {', '.join(files[:8]) or 'nothing'})",
                fix=_fix(board),
            )  # fmt: skip
        root = sdcard.root_partition(parts, path, None)
        release, tree = _modules(raw, root, target, path, work)
        with raw.open("rb") as handle:  # the MBR's disk signature (bytes 440-443)
            handle.seek(440)
            signature = int.from_bytes(handle.read(4), "little")
    say(f"vendor boot partition {boot_part.size // 2**20} MiB ({', '.join(files[:5])}...), "
        f"kernel {release or 'without modules'}")  # fmt: skip
    return VendorBoot(source=path, source_sha256=source_sha256, boot=boot,
                      boot_sha256=sha256_file(boot), boot_type=boot_part.type.lower(), files=files,
                      kernel_release=release, tree=tree,
                      disk_id=f"{signature:08x}" if signature else None)  # fmt: skip


def _fix(board: Board) -> str:
    return (f"Give the vendor's SD-card image of a {board.name}, as downloaded (its boot "
            f"partition holds {', '.join(board.vendor_files)}).")  # fmt: skip


def _has(files: list[str], name: str) -> bool:
    """``name`` in the FAT's listing (case-insensitively, as FAT is); A|B means either."""
    return any(f.lower() == n.lower() for n in name.split("|") for f in files)


def _copy_range(image: Path, start: int, size: int, out: Path) -> None:
    """Bytes [start, start+size) of ``image`` into ``out``, holes kept."""
    with image.open("rb") as source, out.open("wb") as sink:
        source.seek(start)
        left = size
        while left:
            chunk = source.read(min(left, 1 << 20))
            if not chunk:
                raise UsageError(f"{image} ends inside its boot partition",
                                 fix="The image is truncated: download it again.")  # fmt: skip
            if chunk.count(0) == len(chunk):
                sink.seek(len(chunk), os.SEEK_CUR)
            else:
                sink.write(chunk)
            left -= len(chunk)
        sink.truncate(size)


def _modules(raw: Path, root: sdcard.Partition, target: BoardTarget, original: Path,
             work: Path) -> tuple[str | None, Path | None]:  # fmt: skip
    """The vendor kernel's release and a tree of its modules and firmware (usr/lib/...), dumped
    with debugfs (ext2/3/4 only, read-only, nothing mounted); a module of another arch than
    the target's is a user error."""
    if root.fstype not in ("ext2", "ext3", "ext4"):
        return None, None
    device = f"{raw}?offset={root.start}"
    for where in ("/usr/lib/modules", "/lib/modules"):
        listed = process.run(["debugfs", "-R", f"ls -p {where}", device], timeout=120, check=False)
        releases = [f.split("/")[5] for f in listed.stdout.splitlines()
                    if f.startswith("/") and len(f.split("/")) > 5]  # fmt: skip
        releases = [r for r in releases if _RELEASE.match(r)]
        if releases:
            break
    else:
        return None, None
    release = sorted(releases)[-1]
    tree = work / "vendor-tree"
    (tree / "usr/lib/modules").mkdir(parents=True)
    process.run(
        ["debugfs", "-R", f"rdump {where}/{release} {tree}/usr/lib/modules", device], timeout=600
    )
    for firmware in ("/usr/lib/firmware", "/lib/firmware"):
        process.run(
            ["debugfs", "-R", f"rdump {firmware} {tree}/usr/lib", device], timeout=600, check=False
        )
    _check_arch(tree / "usr/lib/modules" / release, target, original)
    return release, tree


def _check_arch(modules: Path, target: BoardTarget, original: Path) -> None:
    for module in sorted(modules.rglob("*.ko"))[:1]:
        with module.open("rb") as handle:
            if not is_elf(handle.read(4)):
                return
            handle.seek(0)
            facts = read_facts(handle)
        if facts.arch != target.arch.name:
            raise UsageError(
                f"--boot-from {original}: its kernel is for {facts.arch or facts.machine}, not "
                f"{target.arch.name} ({target.name})",
                fix="Give the vendor image of this board for the target's arch, or another --target.",
            )  # fmt: skip
