"""Tiny static ARM executables, made in memory, that prove an ARM binary really runs here.

Each one writes ``MESSAGE`` to stdout with the write syscall and exits 0: no libc, no loader, so
the only things that can make it fail are the kernel's binfmt_misc entry and QEMU. The machine code
is a handful of hand-assembled instructions (listed beside each word); the ELF headers are packed
with ``struct`` from the ELF specification.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MESSAGE = b"dockerarch-probe-ok\n"

EM_ARM = 40
EM_AARCH64 = 183
# EABI version 5, hard-float calling convention: what armhf (armv7) userlands use.
EF_ARM_EABI_VER5_HARD = 0x05000400


@dataclass(frozen=True)
class ProbeArch:
    name: str  # dockerarch's arch name
    elf_class: int  # 1: ELFCLASS32, 2: ELFCLASS64
    machine: int
    flags: int
    base: int
    code: bytes  # must end where MESSAGE starts


def _words(*words: int) -> bytes:
    return b"".join(struct.pack("<I", w) for w in words)


# A32, ARM state. MESSAGE follows the 8 instructions, at code offset 32.
_ARM_CODE = _words(
    0xE3A00001,  # mov r0, #1          fd = stdout
    0xE28F1014,  # add r1, pc, #20     r1 = &MESSAGE (pc reads 8 ahead: 4 + 8 + 20 = 32)
    0xE3A02000 | len(MESSAGE),  # mov r2, #len
    0xE3A07004,  # mov r7, #4          __NR_write
    0xEF000000,  # svc #0
    0xE3A00000,  # mov r0, #0          status
    0xE3A07001,  # mov r7, #1          __NR_exit
    0xEF000000,  # svc #0
)

# A64. MESSAGE at code offset 32; adr at offset 4 so the distance is 28 (immhi = 7, immlo = 0).
_AARCH64_CODE = _words(
    0xD2800020,  # mov x0, #1          fd = stdout
    0x100000E1,  # adr x1, .+28        x1 = &MESSAGE
    0xD2800002 | (len(MESSAGE) << 5),  # mov x2, #len
    0xD2800808,  # mov x8, #64         __NR_write
    0xD4000001,  # svc #0
    0xD2800000,  # mov x0, #0          status
    0xD2800BA8,  # mov x8, #93         __NR_exit
    0xD4000001,  # svc #0
)

PROBES: dict[str, ProbeArch] = {
    "armv7": ProbeArch("armv7", 1, EM_ARM, EF_ARM_EABI_VER5_HARD, 0x10000, _ARM_CODE),
    "aarch64": ProbeArch("aarch64", 2, EM_AARCH64, 0, 0x400000, _AARCH64_CODE),
}


def probe_executable(arch: str) -> bytes:
    """A complete static ELF executable for ``arch`` ("armv7" or "aarch64")."""
    spec = PROBES[arch]
    is64 = spec.elf_class == 2
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    entry = spec.base + ehsize + phentsize
    body = spec.code + MESSAGE
    total = ehsize + phentsize + len(body)
    ident = b"\x7fELF" + bytes([spec.elf_class, 1, 1, 0]) + bytes(8)  # LSB, version 1, SysV
    et_exec, ev_current, pt_load, pf_rx = 2, 1, 1, 5
    if is64:
        header = ident + struct.pack(
            "<HHIQQQIHHHHHH",
            et_exec, spec.machine, ev_current, entry, ehsize, 0, spec.flags,
            ehsize, phentsize, 1, 0, 0, 0,
        )  # fmt: skip
        phdr = struct.pack(
            "<IIQQQQQQ", pt_load, pf_rx, 0, spec.base, spec.base, total, total, 0x1000
        )
    else:
        header = ident + struct.pack(
            "<HHIIIIIHHHHHH",
            et_exec, spec.machine, ev_current, entry, ehsize, 0, spec.flags,
            ehsize, phentsize, 1, 0, 0, 0,
        )  # fmt: skip
        phdr = struct.pack(
            "<IIIIIIII", pt_load, 0, spec.base, spec.base, total, total, pf_rx, 0x1000
        )
    assert len(header) == ehsize and len(phdr) == phentsize
    return header + phdr + body
