"""A bundle's object file checked against the MCU it is for, before anyone links or flashes it.

An ELF relocatable object for ARM (pyelftools) whose ARM attributes say Thumb code for the
M profile's v7E-M, the FPU within what the MCU runs and the float ABI asked for (hard: floats in
VFP registers); whose entry point is a Thumb function; whose undefined symbols newlib, libgcc or
the kit's shims define; and that fits, with its weights and scratch memory, in the MCU's flash
and RAM.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import ARMAttributesSection, SymbolTableSection

from dockerarch.artifacts import VerificationError
from dockerarch.errors import UsageError
from dockerarch.mcu.header import BundleHeader
from dockerarch.mcu.profiles import Mcu, size_text

V7EM = 13  # Tag_CPU_arch: ARM v7E-M (Cortex-M4, M7)
PROFILE_M = ord("M")
# glibc-only symbols libjit's code may reference, which the kit's shims (kit/glow_shims.c) define
# on top of newlib.
KIT_SHIMS = frozenset({"__assert_fail"})
# The kit reserves this much RAM for the stack and newlib's heap beside the bundle's buffers.
KIT_RAM = 16 << 10


@dataclass(frozen=True)
class ObjectFacts:
    attributes: dict[str, object]
    thumb_functions: frozenset[str]
    arm_functions: frozenset[str]
    undefined: frozenset[str]
    code_size: int  # allocated, read-only sections: text and read-only data (flash)
    data_size: int  # allocated, writable sections (RAM; initialised ones also take flash)


@dataclass
class FitReport:
    flash_needed: int
    flash: int
    ram_needed: int
    ram: int
    parts: dict[str, int] = field(default_factory=dict)


def read_object(data: bytes, where: str) -> ObjectFacts:
    try:
        elf = ELFFile(io.BytesIO(data))
    except ELFError as exc:
        raise UsageError(f"{where} is not an ELF object ({exc})",
                         fix="Give the .o model-compiler wrote (-emit-bundle).") from None  # fmt: skip
    if elf.elfclass != 32 or elf["e_machine"] != "EM_ARM" or elf["e_type"] != "ET_REL":
        raise VerificationError(
            f"{where} is a {elf.elfclass}-bit {elf['e_machine']} {elf['e_type']} file, not an ARM "
            "relocatable object",
            fix="Make the bundle with -target=arm (dockerarch bundle make does): a bundle for "
            "x86 or a linked program cannot go into Cortex-M firmware.",
        )
    attributes: dict[str, object] = {}
    code = data_ = 0
    thumb: set[str] = set()
    arm: set[str] = set()
    undefined: set[str] = set()
    for section in elf.iter_sections():
        flags = section["sh_flags"]
        if flags & 0x2:  # SHF_ALLOC
            if flags & 0x1:  # SHF_WRITE
                data_ += section["sh_size"]
            else:
                code += section["sh_size"]
        if isinstance(section, ARMAttributesSection):
            for sub in section.iter_subsections():
                for subsub in sub.iter_subsubsections():
                    for attribute in subsub.iter_attributes():
                        attributes[attribute.tag] = attribute.value
        if isinstance(section, SymbolTableSection):
            for symbol in section.iter_symbols():
                kind = symbol["st_info"]["type"]
                bind = symbol["st_info"]["bind"]
                if symbol["st_shndx"] == "SHN_UNDEF":
                    if symbol.name and bind != "STB_WEAK":
                        undefined.add(symbol.name)
                elif kind == "STT_FUNC" and bind != "STB_LOCAL":
                    (thumb if symbol["st_value"] & 1 else arm).add(symbol.name)
    return ObjectFacts(attributes, frozenset(thumb), frozenset(arm), frozenset(undefined), code,
                       data_)  # fmt: skip


def check_code(facts: ObjectFacts, mcu: Mcu, entry: str, where: str) -> None:
    """Thumb code for v7E-M with an FPU the MCU has, hard-float calls, the entry a Thumb function."""
    a = facts.attributes
    if not a:
        raise VerificationError(f"{where} has no ARM attributes (.ARM.attributes)",
                         fix="Make the bundle with model-compiler -target=arm -mcpu=...") from None  # fmt: skip
    arch, profile = a.get("TAG_CPU_ARCH"), a.get("TAG_CPU_ARCH_PROFILE")
    if arch != V7EM or profile != PROFILE_M:
        name = f"{chr(profile)}-profile" if isinstance(profile, int) and profile else "no profile"
        raise VerificationError(
            f"{where} is code for CPU architecture {arch} ({name}), not ARMv7E-M "
            f"({V7EM}, M-profile): {mcu.cpu} cannot run it",
            fix=f"Make the bundle with -mcpu={mcu.cpu} (dockerarch bundle make --mcu {mcu.name}).",
        )
    if a.get("TAG_ARM_ISA_USE", 0) or a.get("TAG_THUMB_ISA_USE", 0) == 0 or facts.arm_functions:
        arm_functions = ", ".join(sorted(facts.arm_functions)[:3])
        raise VerificationError(
            f"{where} holds ARM-state code{' (' + arm_functions + ')' if arm_functions else ''}: "
            "a Cortex-M runs Thumb code only",
            fix=f"Make the bundle with -mcpu={mcu.cpu}, which selects Thumb.",
        )
    fp_arch = a.get("TAG_FP_ARCH", 0)
    if not isinstance(fp_arch, int) or fp_arch > mcu.fp_arch_max:
        raise VerificationError(
            f"{where} uses floating-point architecture {fp_arch} (Tag_FP_arch); {mcu.name}'s "
            f"{mcu.fpu} runs up to {mcu.fp_arch_max}",
            fix=f"Make the bundle for this MCU: -mcpu={mcu.cpu} (dockerarch bundle make --mcu "
            f"{mcu.name}).",
        )
    if a.get("TAG_ABI_VFP_ARGS", 0) != 1:
        raise VerificationError(
            f"{where} passes floats in integer registers (soft-float ABI); the kit, newlib's "
            f"{mcu.fpu} libraries and firmware for {mcu.name} use the hard-float ABI",
            fix="Make the bundle with -float-abi=hard (dockerarch bundle make does).",
        )
    if entry not in facts.thumb_functions:
        raise VerificationError(
            f"{where} does not define the inference function '{entry}' its header declares",
            fix="The header and the object come from different bundles: make the bundle again.",
        )


def armap_symbols(archive: bytes) -> set[str]:
    """The global symbols an ``ar`` archive defines, from its symbol index (GNU's ``/`` member:
    a big-endian count, the members' offsets, then the names)."""
    if not archive.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    pos = 8
    while pos + 60 <= len(archive):
        header = archive[pos : pos + 60]
        name = header[:16].rstrip(b" ")
        size = int(header[48:58].strip() or b"0")
        body = archive[pos + 60 : pos + 60 + size]
        if name == b"/":
            count = int.from_bytes(body[:4], "big")
            names = body[4 + 4 * count :].split(b"\0")[:count]
            return {n.decode("ascii", "replace") for n in names}
        pos += 60 + size + (size & 1)
    return set()


def unresolved(undefined: Iterable[str], libraries: Iterable[bytes]) -> list[str]:
    """The undefined symbols none of ``libraries`` (ar archives) nor the kit's shims define."""
    defined: set[str] = set(KIT_SHIMS)
    for archive in libraries:
        defined |= armap_symbols(archive)
    return sorted(set(undefined) - defined)


def check_symbols(missing: list[str], where: str) -> None:
    if missing:
        shown = ", ".join(missing[:8]) + (
            f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        )
        raise VerificationError(
            f"{where} needs {shown}, which neither newlib, libgcc nor the firmware kit defines: "
            "the firmware would not link",
            fix="A bundle for a Cortex-M can only call C library functions newlib has; an "
            "operator that needs another one must be replaced in the model, or the symbol "
            "defined in your firmware.",
        )


def fit(facts: ObjectFacts, header: BundleHeader, mcu: Mcu) -> FitReport:
    """Flash: the code and read-only data, the constant weights, initialised data. RAM: the
    mutable weights and activations (aligned), the object's own data and the kit's stack and heap."""
    align = max(header.alignment, 1)

    def aligned(size: int) -> int:
        return -(-size // align) * align

    parts = {
        "code": facts.code_size,
        "constant weights": header.constant_size,
        "mutable weights": aligned(header.mutable_size),
        "activations": aligned(header.activations_size),
        "object data": facts.data_size,
        "stack and heap": KIT_RAM,
    }
    flash_needed = parts["code"] + parts["constant weights"] + parts["object data"]
    ram_needed = (parts["mutable weights"] + parts["activations"] + parts["object data"]
                  + parts["stack and heap"])  # fmt: skip
    return FitReport(flash_needed, mcu.flash, ram_needed, mcu.ram, parts)


def check_fit(report: FitReport, mcu: Mcu) -> None:
    flash_parts = ("code", "constant weights", "object data")
    ram_parts = ("mutable weights", "activations", "object data", "stack and heap")
    for memory, needed, has, option, names in (
        ("flash", report.flash_needed, report.flash, "--flash", flash_parts),
        ("RAM", report.ram_needed, report.ram, "--ram", ram_parts),
    ):
        if needed > has:
            parts = ", ".join(f"{k} {report.parts[k]}" for k in names if report.parts[k])
            raise VerificationError(
                f"The bundle does not fit {mcu.name}'s {memory}: it needs {size_text(needed)}, "
                f"the MCU has {size_text(has)} ({parts})",
                fix=f"Give a smaller model (fewer or quantised weights), or the memory your board "
                f"really has with {option} (external SDRAM or flash).",
            )


def read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror or exc}",
                         fix="Give the bundle's directory as model-compiler wrote it.") from None  # fmt: skip
