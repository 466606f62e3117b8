"""The boards export-img makes cards for: data (data/boards.yaml, extended by a project's own
boards.yaml), as targets are."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockerarch.config import did_you_mean, load_yaml, reject_unknown, require_mapping
from dockerarch.errors import ConfigError, UsageError
from dockerarch.paths import data_path
from dockerarch.targets import BoardTarget

PROJECT_BOARDS = "boards.yaml"
BOOT_KINDS = ("debian-raspi", "vendor")
FIELDS = ("description", "targets", "boot", "kernel", "device_tree", "initramfs_modules",
          "console", "user", "qemu", "vendor_files", "boot_mount")  # fmt: skip
OPTIONAL = ("qemu", "kernel", "device_tree", "initramfs_modules", "vendor_files", "boot_mount")
QEMU_FIELDS = ("system", "machine", "memory", "console", "serial_port", "device_tree",
               "append", "cpu", "smp", "disk")  # fmt: skip
DISKS = ("sd", "virtio")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_MODULE = re.compile(r"^[A-Za-z0-9_-]+$")
_CONSOLE = re.compile(r"^tty[A-Za-z]+[0-9]+(,[0-9]+)?$")


@dataclass(frozen=True)
class Qemu:
    """How the boot test starts a card of this board for one arch."""

    system: str
    machine: str
    memory: str
    console: str
    serial_port: int = 0  # which of the machine's UARTs the console is
    device_tree: str | None = None  # another device tree than the board's (raspi2b for armv7)
    append: str = ""  # kernel parameters the emulated machine needs besides the card's own
    cpu: str = ""  # -cpu (QEMU's generic virt machine has none of its own)
    smp: int = 1  # -smp, for a machine whose CPU count is not fixed
    disk: str = "sd"  # how the card is attached: sd (the board's SD host) or virtio

    @property
    def board_device_tree(self) -> bool:
        """Whether the kernel is given the board's device tree: QEMU's virt machine makes its
        own, from the devices it has."""
        return self.machine.split(",")[0] != "virt"


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    targets: tuple[str, ...]
    boot: str
    kernel: Mapping[str, str]  # arch -> kernel package
    device_tree: str
    initramfs_modules: tuple[str, ...]
    console: str
    user: str
    qemu: Mapping[str, Qemu] = field(default_factory=dict)
    vendor_files: tuple[str, ...] = ()  # what a vendor image's boot partition holds (A|B: either)
    boot_mount: str = "/boot/firmware"  # where the booted system mounts the boot partition
    source: str = ""

    def boot_kind(self, target: BoardTarget, boot_from: bool) -> str:
        """How the card's boot partition is made for ``target``: from the vendor's image when
        one is given (--boot-from), else the board's own kind; Debian's kernel and firmware
        only go with a Debian userland. A user error when neither can."""
        if boot_from:
            if not self.vendor_files:
                raise UsageError(f"A {self.name} card takes no --boot-from: its boot partition is "
                                 f"made from the target's own packages ({self.boot})",
                                 fix="Leave --boot-from out.")  # fmt: skip
            return "vendor"
        if self.boot == "debian-raspi" and target.distro == "debian":
            return self.boot
        raise UsageError(
            f"A {self.name} card with the {target.name} userland needs the vendor's boot "
            f"partition: no boot source for it is known",
            fix=f"Give --boot-from IMAGE, the vendor's SD-card image of a {self.name} (its boot "
            f"partition holds {', '.join(self.vendor_files) or 'the firmware'}).",
        )  # fmt: skip

    def check_target(self, target: BoardTarget) -> None:
        """A user error unless this board boots ``target``'s userland."""
        if target.name not in self.targets:
            raise UsageError(
                f"A {self.name} card cannot be made with the {target.name} userland: "
                f"{self.description} boots {', '.join(self.targets)}",
                fix=f"Give --target {self.targets[0]} (or another of those), or add the target "
                f"to the board in a {PROJECT_BOARDS}.",
            )
        if (
            self.boot == "debian-raspi"
            and target.distro == "debian"
            and target.arch.name not in self.kernel
        ):
            raise ConfigError(f"Board {self.name} ({self.source}) names no kernel for "
                              f"{target.arch.name}", fix="Add it under kernel:.")  # fmt: skip


def project_boards_file() -> Path | None:
    env = os.environ.get("DOCKERARCH_BOARDS")
    if env:
        if not Path(env).is_file():
            raise ConfigError(f"DOCKERARCH_BOARDS names {env}, which does not exist")
        return Path(env)
    local = Path.cwd() / PROJECT_BOARDS
    return local if local.is_file() else None


def load_boards(project_file: Path | None = None) -> dict[str, Board]:
    """The built-in boards with the project's changes and additions."""
    merged: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    files = [data_path("boards.yaml")]
    project_file = project_file or project_boards_file()
    if project_file is not None:
        files.append(project_file)
    for path in files:
        top = require_mapping(load_yaml(path), "", path)
        reject_unknown(top, ["boards"], "", path)
        for name, raw in require_mapping(top.get("boards"), "boards", path).items():
            name = str(name)
            if not _NAME.match(name):
                raise ConfigError(f"Board name '{name}' in {path} is not lowercase letters, "
                                  "digits and dashes")  # fmt: skip
            body = require_mapping(raw, f"boards.{name}", path)
            reject_unknown(body, FIELDS, f"boards.{name}", path)
            merged[name] = {**merged.get(name, {}), **body}
            sources[name] = f"{sources[name]} + {path}" if name in sources else str(path)
    return {name: _build(name, body, sources[name]) for name, body in merged.items()}


def _build(name: str, body: Mapping[str, Any], source: str) -> Board:
    where = f"boards.{name} ({source})"
    missing = [key for key in FIELDS if key not in body and key not in OPTIONAL]
    if missing:
        raise ConfigError(f"{where} lacks {', '.join(missing)}", fix="Give every field.")
    if body["boot"] not in BOOT_KINDS:
        raise ConfigError(f"{where}: boot is {body['boot']!r}",
                          fix=f"Give one of: {', '.join(BOOT_KINDS)}.")  # fmt: skip
    if body["boot"] == "vendor" and not body.get("vendor_files"):
        raise ConfigError(f"{where}: a vendor-booted board names its vendor_files")
    if body["boot"] == "debian-raspi" and not (body.get("kernel") and body.get("device_tree")):
        raise ConfigError(f"{where}: a debian-raspi board names its kernel and device_tree")
    modules = [str(m) for m in body.get("initramfs_modules") or []]
    if not all(_MODULE.match(m) for m in modules):
        raise ConfigError(f"{where}: initramfs_modules are kernel module names", fix="Like: ext4.")
    if not _CONSOLE.match(str(body["console"])):
        raise ConfigError(f"{where}: console {body['console']!r} is not like ttyS1,115200")
    qemu = {}
    for arch, raw in require_mapping(
        body.get("qemu") or {}, f"boards.{name}.qemu", Path(source)
    ).items():
        entry = require_mapping(raw, f"boards.{name}.qemu.{arch}", Path(source))
        reject_unknown(entry, QEMU_FIELDS, f"boards.{name}.qemu.{arch}", Path(source))
        if str(entry.get("disk", "sd")) not in DISKS:
            raise ConfigError(f"{where}: qemu.{arch}.disk is {entry['disk']!r}",
                              fix=f"Give one of: {', '.join(DISKS)}.")  # fmt: skip
        qemu[str(arch)] = Qemu(
            system=str(entry.get("system", "")), machine=str(entry.get("machine", "")),
            memory=str(entry.get("memory", "1G")), console=str(entry.get("console", "")),
            serial_port=int(entry.get("serial_port", 0)),
            device_tree=str(entry["device_tree"]) if entry.get("device_tree") else None,
            append=str(entry.get("append") or ""), cpu=str(entry.get("cpu") or ""),
            smp=int(entry.get("smp", 1)), disk=str(entry.get("disk", "sd")),
        )  # fmt: skip
    return Board(
        name=name, description=str(body["description"]),
        targets=tuple(str(t) for t in body["targets"]), boot=str(body["boot"]),
        kernel={str(k): str(v) for k, v in require_mapping(body.get("kernel"), f"boards.{name}.kernel",
                                                           Path(source)).items()},
        device_tree=str(body.get("device_tree") or ""), initramfs_modules=tuple(modules),
        console=str(body["console"]), user=str(body["user"]), qemu=qemu, source=source,
        vendor_files=tuple(str(f) for f in body.get("vendor_files") or ()),
        boot_mount=str(body.get("boot_mount") or "/boot/firmware"),
    )  # fmt: skip


def find_board(boards: Mapping[str, Board], name: str) -> Board:
    if name in boards:
        return boards[name]
    raise UsageError(
        f"Unknown board '{name}'.{did_you_mean(name, boards)}",
        fix=f"Boards: {', '.join(sorted(boards))} (a project adds its own in {PROJECT_BOARDS}).",
    )
