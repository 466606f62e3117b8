"""Small shared objects made in memory for the tests: an ELF header, a PT_LOAD over the whole
file, a PT_DYNAMIC with the entries asked for, and their string table (no section headers, as a
stripped library: what the target's loader reads). aarch64 (ELFCLASS64) or ARM hard-float
(ELFCLASS32, EABI5)."""

from __future__ import annotations

import struct

DT = {"NEEDED": 1, "STRTAB": 5, "STRSZ": 10, "SONAME": 14, "RPATH": 15, "RUNPATH": 29,
      "FLAGS_1": 0x6FFFFFFB}  # fmt: skip
MACHINES = {"aarch64": (2, 183, 0), "armhf": (1, 40, 0x05000400), "armel": (1, 40, 0x05000200)}


def shared_object(machine: str = "aarch64", *, needed: tuple[str, ...] = (), soname: str | None = None,
                  rpath: str | None = None, runpath: str | None = None, flags_1: int = 0) -> bytes:  # fmt: skip
    elf_class, e_machine, e_flags = MACHINES[machine]
    wide = elf_class == 2
    strings = b"\0"
    entries: list[tuple[int, int]] = []

    def text(value: str) -> int:
        nonlocal strings
        offset = len(strings)
        strings += value.encode() + b"\0"
        return offset

    for name in needed:
        entries.append((DT["NEEDED"], text(name)))
    if soname is not None:
        entries.append((DT["SONAME"], text(soname)))
    if rpath is not None:
        entries.append((DT["RPATH"], text(rpath)))
    if runpath is not None:
        entries.append((DT["RUNPATH"], text(runpath)))
    if flags_1:
        entries.append((DT["FLAGS_1"], flags_1))
    header_size, phdr_size, dyn_size = (64, 56, 16) if wide else (52, 32, 8)
    dyn_offset = header_size + 2 * phdr_size
    str_offset = dyn_offset + (len(entries) + 3) * dyn_size
    entries += [(DT["STRTAB"], str_offset), (DT["STRSZ"], len(strings)), (0, 0)]
    total = str_offset + len(strings)
    ident = b"\x7fELF" + bytes([elf_class, 1, 1, 0]) + bytes(8)
    if wide:
        header = ident + struct.pack("<HHIQQQIHHHHHH", 3, e_machine, 1, 0, header_size, 0, e_flags,
                                     header_size, phdr_size, 2, 64, 0, 0)  # fmt: skip
        load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 0x1000)
        dynamic = struct.pack("<IIQQQQQQ", 2, 6, dyn_offset, dyn_offset, dyn_offset,
                              str_offset - dyn_offset, str_offset - dyn_offset, 8)  # fmt: skip
        table = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    else:
        header = ident + struct.pack("<HHIIIIIHHHHHH", 3, e_machine, 1, 0, header_size, 0, e_flags,
                                     header_size, phdr_size, 2, 40, 0, 0)  # fmt: skip
        load = struct.pack("<IIIIIIII", 1, 0, 0, 0, total, total, 5, 0x1000)
        dynamic = struct.pack("<IIIIIIII", 2, dyn_offset, dyn_offset, dyn_offset,
                              str_offset - dyn_offset, str_offset - dyn_offset, 6, 4)  # fmt: skip
        table = b"".join(struct.pack("<iI", tag, value) for tag, value in entries)
    data = header + load + dynamic + table + strings
    assert len(data) == total
    return data


def ld_so_cache(entries: list[tuple[str, str]], flags: int = 0x0A03) -> bytes:
    """/etc/ld.so.cache in glibc's new format (as ldconfig writes it since 2.32)."""
    strings = b""
    offsets = []
    head = 48 + 24 * len(entries)
    for soname, path in entries:
        key = head + len(strings)
        strings += soname.encode() + b"\0"
        value = head + len(strings)
        strings += path.encode() + b"\0"
        offsets.append((key, value))
    data = struct.pack("<20sIIB3xI12x", b"glibc-ld.so.cache1.1", len(entries), len(strings), 2, 0)
    for key, value in offsets:
        data += struct.pack("<iIIIQ", flags, key, value, 0, 0)
    return data + strings
