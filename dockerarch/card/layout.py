"""A card's identities and layout, all derived from its inputs, so that the same inputs give the
same bytes: the MBR disk id (hence both PARTUUIDs), the root filesystem's UUID and directory hash
seed, the FAT volume id, a password hash's salt. One MBR (the Pi's boot ROM reads no GPT), a FAT
boot partition at 4 MiB and the ext4 root after it, where PYNQ's and Debian's boot arguments
look for it (partition 2)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

ALIGN_MIB = 4  # where the first partition starts: SD cards' erase blocks are 4 MiB
BOOT_MIB = 256  # the FAT boot partition: firmware, two kernels and initramfs with room
SECTOR = 512


@dataclass(frozen=True)
class Identities:
    disk_id: str  # 8 hex digits: the MBR's disk signature, and PARTUUIDs DISKID-01, DISKID-02
    root_uuid: str
    hash_seed: str
    boot_volid: str  # 8 hex digits: the FAT volume id
    salt: str  # 16 characters of a password hash's salt

    @property
    def boot_partuuid(self) -> str:
        return f"{self.disk_id}-01"

    @property
    def root_partuuid(self) -> str:
        return f"{self.disk_id}-02"


def inputs_digest(inputs: Mapping[str, object]) -> str:
    """sha256 of the card's inputs (digests and options), as canonical JSON."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def identities(digest: str) -> Identities:
    """The card's ids from its inputs' digest (a disk id of zero means none to some tools)."""
    more = hashlib.sha256(bytes.fromhex(digest) + b"dockerarch-card").hexdigest()
    disk = digest[:8] if int(digest[:8], 16) else "d0c4e7a1"
    alphabet = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    salt = "".join(alphabet[b % 64] for b in bytes.fromhex(more[32:64]))
    return Identities(
        disk_id=disk,
        root_uuid=str(uuid.UUID(digest[8:40], version=4)),
        hash_seed=str(uuid.UUID(more[:32], version=4)),
        boot_volid=(digest[40:48] if int(digest[40:48], 16) else "b007b007").upper(),
        salt=salt,
    )


def cmdline(ids: Identities, console: str, extra: str = "") -> str:
    """The kernel command line of the card (cmdline.txt): the root by PARTUUID, the board's
    serial console (and the screen's)."""
    words = [f"console={console}", "console=tty1", f"root=PARTUUID={ids.root_partuuid}",
             "rootfstype=ext4", "rootwait", "fsck.repair=yes"]  # fmt: skip
    return " ".join(words + ([extra] if extra else []))


def fstab(ids: Identities, boot_mount: str = "/boot/firmware") -> str:
    return (f"PARTUUID={ids.root_partuuid}\t/\text4\tdefaults,noatime\t0\t1\n"
            f"PARTUUID={ids.boot_partuuid}\t{boot_mount}\tvfat\tdefaults,noatime\t0\t2\n")  # fmt: skip


def parse_size(text: str) -> int:
    """``--size`` in MiB: 2G, 1500M, 3.5GiB (binary units; a bare number is MiB)."""
    from dockerarch.errors import UsageError

    units = {"": 1, "m": 1, "mb": 1, "mib": 1, "g": 1024, "gb": 1024, "gib": 1024}
    value = text.strip().lower()
    number = value.rstrip("mgib")
    unit = value[len(number) :]
    try:
        mib = float(number) * units[unit]
    except (ValueError, KeyError):
        raise UsageError(f"--size {text!r} is not a size",
                         fix="Give it in MiB or GiB, like --size 2G or --size 1500M.") from None  # fmt: skip
    if mib <= ALIGN_MIB + BOOT_MIB:
        raise UsageError(f"--size {text} leaves no room for the root partition",
                         fix=f"The boot partition alone takes {ALIGN_MIB + BOOT_MIB} MiB; give "
                         "at least 1G.")  # fmt: skip
    return int(mib) // ALIGN_MIB * ALIGN_MIB
