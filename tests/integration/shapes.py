"""What must not change between two builds of the same source that differ only in how they ran:
the shape of a shared object."""

from __future__ import annotations

import io

from elftools.elf.elffile import ELFFile


def elf_shape(data: bytes) -> tuple[list[str], dict[str, int]]:
    """Dynamic symbols (name, section index kind, binding) and the size of each loadable section."""
    elf = ELFFile(io.BytesIO(data))
    dynsym = elf.get_section_by_name(".dynsym")
    symbols = sorted(
        f"{s.name} {s['st_info']['bind']} {s['st_info']['type']} "
        f"{'UND' if s['st_shndx'] == 'SHN_UNDEF' else 'DEF'}"
        for s in dynsym.iter_symbols()  # type: ignore[union-attr]
    )
    loadable = {
        s.name: s["sh_size"]
        for s in elf.iter_sections()
        if s["sh_flags"] & 0x2  # SHF_ALLOC
    }
    return symbols, loadable
