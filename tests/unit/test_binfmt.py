from __future__ import annotations

from pathlib import Path

from dockerarch import binfmt
from dockerarch.arm_probe import probe_executable

QEMU_ARM = """enabled
interpreter /usr/libexec/qemu-binfmt/arm-binfmt-P
flags: PF
offset 0
magic 7f454c4601010100000000000000000002002800
mask ffffffffffffff00fffffffffffffffffeffffff
"""
QEMU_AARCH64 = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: POCF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""
JAR = """enabled
interpreter /usr/bin/jexec
flags: \nextension .jar
"""


def test_parse_entry() -> None:
    entry = binfmt.parse_entry("qemu-arm", QEMU_ARM)
    assert entry is not None
    assert entry.enabled and entry.fix_binary
    assert entry.interpreter == "/usr/libexec/qemu-binfmt/arm-binfmt-P"
    assert entry.offset == 0 and entry.magic[:4] == b"\x7fELF"


def test_extension_entries_are_ignored() -> None:
    assert binfmt.parse_entry("jar", JAR) is None


def test_entries_match_their_own_architecture_only() -> None:
    arm = binfmt.parse_entry("qemu-arm", QEMU_ARM)
    a64 = binfmt.parse_entry("qemu-aarch64", QEMU_AARCH64)
    assert arm is not None and a64 is not None
    arm_elf, a64_elf = probe_executable("armv7"), probe_executable("aarch64")
    assert arm.matches(arm_elf) and not arm.matches(a64_elf)
    assert a64.matches(a64_elf) and not a64.matches(arm_elf)
    assert not arm.matches(b"\x7fELF")  # too short


def test_read_entries_and_entry_for(tmp_path: Path) -> None:
    (tmp_path / "register").write_text("")
    (tmp_path / "status").write_text("enabled\n")
    (tmp_path / "jar").write_text(JAR)
    (tmp_path / "a-disabled-arm").write_text(QEMU_ARM.replace("enabled", "disabled", 1))
    (tmp_path / "qemu-arm").write_text(QEMU_ARM)
    assert binfmt.is_mounted(tmp_path)
    entries = binfmt.read_entries(tmp_path)
    assert [e.name for e in entries] == ["a-disabled-arm", "qemu-arm"]
    chosen = binfmt.entry_for(probe_executable("armv7"), entries)
    assert chosen is not None and chosen.name == "qemu-arm"  # the enabled one wins
    assert binfmt.entry_for(probe_executable("aarch64"), entries) is None


def test_unmounted(tmp_path: Path) -> None:
    assert not binfmt.is_mounted(tmp_path)
