"""The probe executables are hand-assembled: check the encodings point where they must."""

from __future__ import annotations

import struct

import pytest

from dockerarch.arm_probe import EM_AARCH64, EM_ARM, MESSAGE, probe_executable


def _header(data: bytes) -> dict[str, int]:
    is64 = data[4] == 2
    fmt = "<HHIQQQIHHHHHH" if is64 else "<HHIIIIIHHHHHH"
    names = [
        "type",
        "machine",
        "version",
        "entry",
        "phoff",
        "shoff",
        "flags",
        "ehsize",
        "phentsize",
        "phnum",
    ]
    return dict(zip(names, struct.unpack_from(fmt, data, 16), strict=False))


def _load_base(data: bytes) -> tuple[int, int]:
    h = _header(data)
    if data[4] == 2:
        _, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, h["phoff"])
    else:
        _, offset, vaddr, _, filesz, _, _, _ = struct.unpack_from("<IIIIIIII", data, h["phoff"])
    assert offset == 0 and filesz == len(data)
    return vaddr, h["entry"]


@pytest.mark.parametrize(
    ("arch", "elf_class", "machine"), [("armv7", 1, EM_ARM), ("aarch64", 2, EM_AARCH64)]
)
def test_headers(arch: str, elf_class: int, machine: int) -> None:
    data = probe_executable(arch)
    assert data[:4] == b"\x7fELF"
    assert data[4] == elf_class and data[5] == 1  # little endian
    h = _header(data)
    assert h["type"] == 2 and h["machine"] == machine and h["phnum"] == 1
    assert data.endswith(MESSAGE)
    if arch == "armv7":
        assert h["flags"] & 0xFF000000 == 0x05000000  # EABI5
        assert h["flags"] & 0x400  # hard-float


def test_arm_message_address() -> None:
    data = probe_executable("armv7")
    base, entry = _load_base(data)
    code = data[entry - base :]
    add = struct.unpack_from("<I", code, 4)[0]
    assert add & 0xFFFFF000 == 0xE28F1000  # add r1, pc, #imm
    target = entry + 4 + 8 + (add & 0xFFF)
    assert data[target - base : target - base + len(MESSAGE)] == MESSAGE
    mov_len = struct.unpack_from("<I", code, 8)[0]
    assert mov_len & 0xFF == len(MESSAGE)


def test_aarch64_message_address() -> None:
    data = probe_executable("aarch64")
    base, entry = _load_base(data)
    code = data[entry - base :]
    adr = struct.unpack_from("<I", code, 4)[0]
    assert adr & 0x9F000000 == 0x10000000 and adr & 0x1F == 1  # adr x1
    offset = (((adr >> 5) & 0x7FFFF) << 2) | ((adr >> 29) & 3)
    target = entry + 4 + offset
    assert data[target - base : target - base + len(MESSAGE)] == MESSAGE
    mov_len = struct.unpack_from("<I", code, 8)[0]
    assert (mov_len >> 5) & 0xFFFF == len(MESSAGE)
