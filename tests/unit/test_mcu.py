"""dockerarch bundle's pure parts: MCU profiles and sizes, Glow's header, the object's checks
(from the facts pyelftools reads), newlib's symbols from an archive's index, the fit, the kit's
generated sources."""

from __future__ import annotations

import struct

import pytest

from dockerarch.artifacts import VerificationError
from dockerarch.errors import UsageError
from dockerarch.mcu import header, kit, objcheck, profiles, reference
from tests.unit import elfbytes

HEADER = """// Placeholders:
//
//   Name: "input"
//   Type: float<1 x 3 x 32 x 32>
//   Size: 3072 (elements)
//   Size: 12288 (bytes)
//   Offset: 0 (bytes)
//
//   Name: "output"
//   Type: float<1 x 10>
//   Size: 10 (elements)
//   Size: 40 (bytes)
//   Offset: 12288 (bytes)
//
// Placeholder address offsets within mutable buffer (bytes).
#define NET_input   0
#define NET_output  12288

// Memory sizes (bytes).
#define NET_CONSTANT_MEM_SIZE     46656
#define NET_MUTABLE_MEM_SIZE      12352
#define NET_ACTIVATIONS_MEM_SIZE  65536

// Memory alignment (bytes).
#define NET_MEM_ALIGN  64

// Bundle entry point (inference function). Returns 0
// for correct execution or some error code otherwise.
int net(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations);
"""

GOOD = {"TAG_CPU_ARCH": 13, "TAG_CPU_ARCH_PROFILE": ord("M"), "TAG_ARM_ISA_USE": 0,
        "TAG_THUMB_ISA_USE": 2, "TAG_FP_ARCH": 8, "TAG_ABI_VFP_ARGS": 1}  # fmt: skip


def facts(**changes: object) -> objcheck.ObjectFacts:
    attributes = {**GOOD, **{k: v for k, v in changes.items() if k.startswith("TAG_")}}
    return objcheck.ObjectFacts(
        attributes=attributes,
        thumb_functions=frozenset(changes.get("thumb", {"net"})),  # type: ignore[arg-type]
        arm_functions=frozenset(changes.get("arm", set())),  # type: ignore[arg-type]
        undefined=frozenset({"expf", "memcpy"}),
        code_size=int(changes.get("code", 3000)),  # type: ignore[call-overload]
        data_size=0,
    )


@pytest.mark.parametrize(("text", "size"), [("512K", 512 << 10), ("1M", 1 << 20), ("1.5MiB", 3 << 19),
                                            ("4096", 4096), ("2 gb", 2 << 30)])  # fmt: skip
def test_sizes_take_binary_units(text: str, size: int) -> None:
    assert profiles.parse_size(text) == size


def test_a_size_that_is_not_one_says_how_to_write_it() -> None:
    with pytest.raises(UsageError, match=r"--flash '2 furlongs' is not a size.*--flash 512K"):
        profiles.parse_size("2 furlongs", "--flash")


def test_the_known_mcus_and_their_emulators() -> None:
    m7, m4, rt = (profiles.get(n) for n in ("cortex-m7", "cortex-m4", "imxrt1060"))
    assert (m7.qemu, m4.qemu, rt.qemu) == ("mps2-an500", "mps2-an386", "mps2-an500")
    assert m4.fp_arch_max < m7.fp_arch_max and rt.ram == 1 << 20
    assert m7.qemu_ram.origin == 0x20000000 and m7.gcc_flags[-1] == "-mfloat-abi=hard"
    assert m7.with_memory(256 << 10, None).ram == 256 << 10
    with pytest.raises(UsageError, match=r"No microcontroller 'cortex-m0'.*Known: cortex-m7"):
        profiles.get("cortex-m0")


def test_glows_header_is_read() -> None:
    parsed = header.parse(HEADER)
    assert (parsed.entry, parsed.constant_size, parsed.mutable_size, parsed.activations_size,
            parsed.alignment) == ("net", 46656, 12352, 65536, 64)  # fmt: skip
    out = parsed.placeholder("output")
    assert out is not None and (out.kind, out.dims, out.offset, out.elements) == (
        "float",
        (1, 10),
        12288,
        10,
    )


def test_a_header_that_is_not_a_static_bundles_is_refused() -> None:
    with pytest.raises(UsageError, match="NET_ACTIVATIONS_MEM_SIZE"):
        header.parse(HEADER.replace("#define NET_ACTIVATIONS_MEM_SIZE  65536\n", ""))
    with pytest.raises(UsageError, match="declares 0 inference functions"):
        header.parse(HEADER.replace("int net(", "void net("))
    with pytest.raises(UsageError, match=r"'output' .* lies outside the mutable weights"):
        header.parse(HEADER.replace("//   Offset: 12288", "//   Offset: 12320"))


def test_a_good_object_passes_and_each_fault_is_named() -> None:
    m7, m4 = profiles.get("cortex-m7"), profiles.get("cortex-m4")
    objcheck.check_code(facts(), m7, "net", "net.o")
    cases = [
        (
            facts(TAG_CPU_ARCH=10, TAG_CPU_ARCH_PROFILE=ord("A")),
            m7,
            "architecture 10 \\(A-profile\\)",
        ),
        (facts(arm={"helper"}), m7, "ARM-state code \\(helper\\)"),
        (facts(), m4, "floating-point architecture 8.*up to 6"),
        (facts(TAG_ABI_VFP_ARGS=0), m7, "soft-float ABI"),
        (facts(thumb={"other"}), m7, "does not define the inference function 'net'"),
    ]
    for bad, mcu, message in cases:
        with pytest.raises(VerificationError, match=message):
            objcheck.check_code(bad, mcu, "net", "net.o")


def test_a_shared_library_or_a_non_elf_is_not_a_bundle_object() -> None:
    with pytest.raises(
        VerificationError, match="32-bit EM_ARM ET_DYN file, not an ARM relocatable"
    ):
        objcheck.read_object(elfbytes.shared_object("armhf"), "x.o")
    with pytest.raises(UsageError, match="is not an ELF object"):
        objcheck.read_object(b"#!/bin/sh\n", "x.o")


def _archive(symbols: list[str]) -> bytes:
    names = b"".join(s.encode() + b"\0" for s in symbols)
    body = struct.pack(">I", len(symbols)) + struct.pack(">I", 100) * len(symbols) + names
    member = b"/".ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"0".ljust(8)
    member += str(len(body)).encode().ljust(10) + b"`\n" + body + (b"\n" if len(body) % 2 else b"")
    return b"!<arch>\n" + member


def test_newlibs_symbols_come_from_the_archive_index() -> None:
    libc = _archive(["memcpy", "printf", "__assert_func"])
    libm = _archive(["expf", "tanhf"])
    assert objcheck.armap_symbols(libm) == {"expf", "tanhf"}
    missing = objcheck.unresolved(
        {"memcpy", "expf", "__assert_fail", "__isoc99_sscanf"}, [libc, libm]
    )
    assert missing == ["__isoc99_sscanf"]  # __assert_fail: the kit's shim
    with pytest.raises(VerificationError, match="needs __isoc99_sscanf, which neither newlib"):
        objcheck.check_symbols(missing, "net.o")


def test_the_fit_counts_flash_and_ram_and_names_both_sizes() -> None:
    parsed = header.parse(HEADER)
    m7 = profiles.get("cortex-m7")
    report = objcheck.fit(facts(code=3000), parsed, m7)
    assert report.flash_needed == 3000 + 46656
    assert report.ram_needed == 12352 + 65536 + objcheck.KIT_RAM
    objcheck.check_fit(report, m7)
    small = m7.with_memory(64 << 10, None)
    with pytest.raises(
        VerificationError, match=r"RAM: it needs 92\.06 KiB \(94272 bytes\), the MCU has 64\.00 KiB"
    ):
        objcheck.check_fit(objcheck.fit(facts(code=3000), parsed, small), small)


def test_glows_names_for_onnx_values() -> None:
    assert reference.legal_name("input.1") == "input_1"
    assert reference.legal_name("0") == "_0"
    assert reference.legal_name("conv/out") == "conv_out"


def test_the_kits_program_fills_the_inputs_and_prints_the_outputs() -> None:
    parsed = header.parse(HEADER)
    output = parsed.placeholder("output")
    assert output is not None
    source = kit.main_c(parsed, "net.h", "../net.weights.txt", {"input": [1.0, -2.0]}, [output])
    assert "0x3f800000u, 0xc0000000u" in source  # 1.0 and -2.0, exact
    assert "memcpy(mutableWeight + 0, input0, sizeof input0);" in source
    assert "int status = net((uint8_t *)constantWeight, mutableWeight, activations);" in source
    assert "mutableWeight + 12288 + 4 * i" in source and "i < 10u" in source
    script = kit.linker_script(profiles.get("cortex-m4"))
    assert "ORIGIN = 0x20000000, LENGTH = 0x400000" in script and "mps2-an386" in script
