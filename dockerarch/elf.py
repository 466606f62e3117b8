"""What an ELF file needs from the machine that runs it, read with pyelftools.

Machine (EM_ARM, EM_AARCH64, EM_X86_64), the ARM float ABI, and the highest GLIBC_/GLIBCXX_
symbol versions it requires: the facts that decide whether a binary runs on a board.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO

ELF_MAGIC = b"\x7fELF"
EF_ARM_ABI_FLOAT_HARD = 0x400
EF_ARM_ABI_FLOAT_SOFT = 0x200
EF_ARM_EABIMASK = 0xFF000000
# e_machine name -> the dockerarch arch it belongs to
MACHINE_ARCH = {"EM_ARM": "armv7", "EM_AARCH64": "aarch64", "EM_X86_64": "amd64"}
_VERSIONED = re.compile(r"^(GLIBC|GLIBCXX|CXXABI)_(\d+(?:\.\d+)*)$")


@dataclass(frozen=True, kw_only=True)
class ElfFacts:
    machine: str  # "EM_ARM", ...
    elf_class: int  # 32 or 64
    hard_float: bool | None  # ARM only: True for the hard-float ABI (armhf), False for soft-float
    # "GLIBC" -> every version required, e.g. {"GLIBC": [(2, 4), (2, 34)]}
    needs: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)

    @property
    def arch(self) -> str | None:
        return MACHINE_ARCH.get(self.machine)

    def highest(self, library: str) -> tuple[int, ...] | None:
        versions = self.needs.get(library)
        return max(versions) if versions else None


def is_elf(head: bytes) -> bool:
    return head[:4] == ELF_MAGIC


def read_facts(stream: BinaryIO) -> ElfFacts:
    """The facts of the ELF file open in ``stream`` (seekable). Raises ValueError when it is
    not a well-formed ELF file."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    try:
        elf = ELFFile(stream)
        machine = str(elf["e_machine"])
        hard_float = None
        if machine == "EM_ARM":
            flags = int(elf["e_flags"])
            # EABI v5 records the float ABI in e_flags; older objects say nothing (soft-float).
            hard_float = bool(flags & EF_ARM_ABI_FLOAT_HARD) and not flags & EF_ARM_ABI_FLOAT_SOFT
        needs: dict[str, list[tuple[int, ...]]] = {}
        for section in elf.iter_sections():
            if not isinstance(section, GNUVerNeedSection):
                continue
            for _verneed, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    found = _VERSIONED.match(str(aux.name))
                    if found:
                        version = tuple(int(x) for x in found.group(2).split("."))
                        needs.setdefault(found.group(1), []).append(version)
    except (ELFError, KeyError, ValueError, OSError) as exc:
        raise ValueError(f"not a well-formed ELF file ({exc})") from exc
    return ElfFacts(machine=machine, elf_class=elf.elfclass, hard_float=hard_float, needs=needs)


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in version)
