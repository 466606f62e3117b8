"""A Glow bundle's header (static API), read: the entry point, the memory sizes, the alignment
and each placeholder's type and offset in the mutable weights (Glow's BundleSaver writes them as
``#define``s and, for the placeholders, as comments)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dockerarch.errors import UsageError

_TYPE = re.compile(r"(?P<kind>[a-z0-9_]+)\s*<\s*(?P<dims>[0-9 x]*?)\s*>")
_PLACEHOLDER = re.compile(
    r'//\s+Name: "(?P<name>[^"]+)"\s*\n//\s+Type: (?P<type>[^\n]+)\n'
    r"//\s+Size: (?P<elements>\d+) \(elements\)\s*\n//\s+Size: (?P<bytes>\d+) \(bytes\)\s*\n"
    r"//\s+Offset: (?P<offset>\d+) \(bytes\)"
)
_ENTRY = re.compile(
    r"^int\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\(\s*uint8_t\s*\*\s*constantWeight\s*,"
    r"\s*uint8_t\s*\*\s*mutableWeight\s*,\s*uint8_t\s*\*\s*activations\s*\)\s*;",
    re.MULTILINE,
)
# Element kinds whose values the proof compares as numbers (Glow's type names).
ELEMENT_BYTES = {"float": 4, "i32": 4, "i64": 8, "i8": 1, "ui8": 1, "bool": 1, "float16": 2}


@dataclass(frozen=True)
class Placeholder:
    name: str
    kind: str  # Glow's element type: float, i8, ...
    dims: tuple[int, ...]
    size: int  # bytes
    offset: int  # in the mutable weights

    @property
    def elements(self) -> int:
        count = 1
        for dim in self.dims:
            count *= dim
        return count


@dataclass(frozen=True)
class BundleHeader:
    entry: str  # the inference function
    prefix: str  # its macros' prefix (the upper-case network name)
    constant_size: int
    mutable_size: int
    activations_size: int
    alignment: int
    placeholders: tuple[Placeholder, ...]

    def placeholder(self, name: str) -> Placeholder | None:
        return next((p for p in self.placeholders if p.name == name), None)


def _define(text: str, prefix: str, name: str, where: str) -> int:
    match = re.search(rf"^#define\s+{re.escape(prefix)}_{name}\s+(\d+)\s*$", text, re.MULTILINE)
    if not match:
        raise UsageError(
            f"{where} has no {prefix}_{name}: it is not the header of a Glow bundle made with "
            "the static API",
            fix="Make the bundle with -bundle-api=static (dockerarch bundle make does).",
        )
    return int(match.group(1))


def parse(text: str, where: str = "the bundle's header") -> BundleHeader:
    entries = _ENTRY.findall(text)
    if len(entries) != 1:
        raise UsageError(
            f"{where} declares {len(entries)} inference functions of a Glow bundle "
            "(int NAME(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations))",
            fix="Give the header model-compiler wrote for one network (-network-name).",
        )
    entry = entries[0]
    prefix = entry.upper()
    placeholders = []
    for match in _PLACEHOLDER.finditer(text):
        kind = _TYPE.fullmatch(match.group("type").strip())
        dims = tuple(int(d) for d in kind.group("dims").split("x") if d.strip()) if kind else ()
        placeholder = Placeholder(
            name=match.group("name"), kind=kind.group("kind") if kind else match.group("type"),
            dims=dims, size=int(match.group("bytes")), offset=int(match.group("offset")),
        )  # fmt: skip
        placeholders.append(placeholder)
    header = BundleHeader(
        entry=entry,
        prefix=prefix,
        constant_size=_define(text, prefix, "CONSTANT_MEM_SIZE", where),
        mutable_size=_define(text, prefix, "MUTABLE_MEM_SIZE", where),
        activations_size=_define(text, prefix, "ACTIVATIONS_MEM_SIZE", where),
        alignment=_define(text, prefix, "MEM_ALIGN", where),
        placeholders=tuple(placeholders),
    )
    for p in header.placeholders:
        if p.offset + p.size > header.mutable_size:
            raise UsageError(
                f"{where}: placeholder '{p.name}' ({p.size} bytes at offset {p.offset}) lies "
                f"outside the mutable weights ({header.mutable_size} bytes)",
                fix="The header does not belong to this bundle, or was edited: make it again.",
            )
    return header
