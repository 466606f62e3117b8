"""Read the kernel's binfmt_misc entries and find the one that runs a given kind of ELF file.

An entry is found by what it matches (magic and mask against the file's first bytes), not by its
name, so entries registered by Debian's binfmt-support, by tonistiigi/binfmt or by hand all count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")


@dataclass(frozen=True, kw_only=True)
class BinfmtEntry:
    name: str
    enabled: bool
    interpreter: str
    flags: str
    offset: int
    magic: bytes
    mask: bytes

    @property
    def fix_binary(self) -> bool:
        """The F flag: the kernel opens the interpreter at registration, so it works inside
        containers and chroots that do not hold a copy of it."""
        return "F" in self.flags

    def matches(self, header: bytes) -> bool:
        window = header[self.offset : self.offset + len(self.magic)]
        if len(window) < len(self.magic):
            return False
        mask = self.mask or b"\xff" * len(self.magic)
        return all((h & m) == (g & m) for h, g, m in zip(window, self.magic, mask, strict=True))


def parse_entry(name: str, text: str) -> BinfmtEntry | None:
    """Parse the text of ``/proc/sys/fs/binfmt_misc/NAME``; None for extension entries."""
    fields: dict[str, str] = {}
    enabled = False
    for line in text.splitlines():
        line = line.strip()
        if line == "enabled":
            enabled = True
        elif line == "disabled":
            enabled = False
        elif " " in line:
            key, value = line.split(" ", 1)
            fields[key] = value.strip()
        elif line.startswith("flags:"):
            fields["flags:"] = line[len("flags:") :]
    if "magic" not in fields:
        return None  # an extension-based entry ("extension .jar"), never an ELF match
    return BinfmtEntry(
        name=name,
        enabled=enabled,
        interpreter=fields.get("interpreter", ""),
        flags=fields.get("flags:", "").strip(),
        offset=int(fields.get("offset", "0")),
        magic=bytes.fromhex(fields["magic"]),
        mask=bytes.fromhex(fields.get("mask", "")),
    )


def is_mounted(root: Path = BINFMT_DIR) -> bool:
    return (root / "register").exists()


def read_entries(root: Path = BINFMT_DIR) -> list[BinfmtEntry]:
    entries = []
    for path in sorted(root.iterdir()):
        if path.name in ("register", "status"):
            continue
        try:
            entry = parse_entry(path.name, path.read_text())
        except (OSError, ValueError):
            continue
        if entry is not None:
            entries.append(entry)
    return entries


def entry_for(header: bytes, entries: list[BinfmtEntry]) -> BinfmtEntry | None:
    """The entry the kernel would use for a file starting with ``header``.

    The kernel tries entries newest first and takes the first enabled match; /proc lists them
    by name, so prefer an enabled match and otherwise report a disabled one.
    """
    matching = [e for e in entries if e.matches(header)]
    for entry in matching:
        if entry.enabled:
            return entry
    return matching[0] if matching else None
