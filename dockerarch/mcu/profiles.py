"""The microcontrollers a bundle is made for (data/mcus.yaml) and the QEMU boards that run them."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache

import yaml

from dockerarch.errors import UsageError
from dockerarch.paths import data_path

_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}  # fmt: skip


def parse_size(text: str, what: str = "--ram") -> int:
    """Bytes from ``512K``, ``1M``, ``1.5MiB`` or a bare number of bytes (binary units)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise UsageError(
            f"{what} {text!r} is not a size",
            fix=f"Give bytes or binary units, like {what} 512K or {what} 2M.",
        )
    return int(float(match.group(1)) * _UNITS[unit])


def size_text(size: int) -> str:
    """``1048576`` -> ``1.00 MiB (1048576 bytes)``: exact, and readable."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.2f} {unit} ({size} bytes)"
    return f"{size} bytes"


@dataclass(frozen=True)
class Region:
    origin: int
    length: int


@dataclass(frozen=True)
class Mcu:
    name: str
    description: str
    cpu: str  # -mcpu for model-compiler and gcc
    fpu: str  # gcc's -mfpu
    fp_arch_max: int  # the highest Tag_FP_arch this FPU runs
    ram: int
    flash: int
    qemu: str  # the QEMU board of the same core
    qemu_flash: Region
    qemu_ram: Region

    @property
    def gcc_flags(self) -> tuple[str, ...]:
        return (f"-mcpu={self.cpu}", "-mthumb", f"-mfpu={self.fpu}", "-mfloat-abi=hard")

    def with_memory(self, ram: int | None, flash: int | None) -> Mcu:
        return replace(self, ram=self.ram if ram is None else ram,
                       flash=self.flash if flash is None else flash)  # fmt: skip


@cache
def _table() -> dict[str, object]:
    loaded = yaml.safe_load(data_path("mcus.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def names() -> list[str]:
    return [name for name in _table() if name != "machines"]


def get(name: str) -> Mcu:
    table = _table()
    entry = table.get(name) if name != "machines" else None
    if not isinstance(entry, dict):
        raise UsageError(
            f"No microcontroller '{name}' is known",
            fix=f"Known: {', '.join(names())}; for another Cortex-M7 or M4 give the core "
            "(--mcu cortex-m7) with its memory (--ram, --flash).",
        )
    machines = table["machines"]
    assert isinstance(machines, dict)
    machine = machines[entry["qemu"]]
    flash, ram = (
        Region(int(machine[key][0]), parse_size(machine[key][1])) for key in ("flash", "ram")
    )
    return Mcu(
        name=name, description=" ".join(str(entry["description"]).split()), cpu=entry["cpu"],
        fpu=entry["fpu"], fp_arch_max=int(entry["fp_arch_max"]), ram=parse_size(entry["ram"]),
        flash=parse_size(entry["flash"]), qemu=entry["qemu"], qemu_flash=flash, qemu_ram=ram,
    )  # fmt: skip
