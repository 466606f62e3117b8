"""Board targets: which distro, arch, compiler and C library a build must match.

Built-in targets live in ``dockerarch/data/targets.yaml``; a project's own ``targets.yaml``
(in the working directory, or ``$DOCKERARCH_TARGETS``) overrides fields of built-in targets or
adds new ones.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from dockerarch import paths
from dockerarch.config import did_you_mean, load_yaml, reject_unknown, require_mapping
from dockerarch.errors import ConfigError, UsageError

BUILTIN_TARGETS = paths.data_path("targets.yaml")
PROJECT_TARGETS = "targets.yaml"


@dataclass(frozen=True)
class Arch:
    name: str
    platform: str  # OCI platform
    debian_arch: str
    triplet: str  # GNU triplet of Debian's toolchain
    wheel_tag: str  # the platform tag of wheels built for it
    elf_machine: int  # e_machine of its ELF files
    uname: str  # what `uname -m` says under QEMU


ARCHES: dict[str, Arch] = {
    "armv7": Arch("armv7", "linux/arm/v7", "armhf", "arm-linux-gnueabihf", "linux_armv7l", 40, "armv7l"),
    "aarch64": Arch("aarch64", "linux/arm64", "arm64", "aarch64-linux-gnu", "linux_aarch64", 183, "aarch64"),
    # The build host itself: the base of hybrid builds' native toolchain stage (issue 6).
    "amd64": Arch("amd64", "linux/amd64", "amd64", "x86_64-linux-gnu", "linux_x86_64", 62, "x86_64"),
}  # fmt: skip
ARM_ARCHES = ("armv7", "aarch64")
# What recipes build for: the boards' arches, and amd64, built natively on an x86-64 machine
# (x86-64 machines served beside the boards, and the benchmarks' native baseline).
BUILD_ARCHES = (*ARM_ARCHES, "amd64")
ARCH_ALIASES = {
    "armv7": "armv7", "armv7l": "armv7", "armhf": "armv7", "arm": "armv7", "arm/v7": "armv7",
    "linux/arm/v7": "armv7", "amd64": "amd64", "x86_64": "amd64", "linux/amd64": "amd64",
    "aarch64": "aarch64", "arm64": "aarch64", "armv8": "aarch64", "linux/arm64": "aarch64",
}  # fmt: skip
DEFAULT_TARGET_FOR_ARCH = {
    "armv7": "debian-armv7", "aarch64": "debian-aarch64", "amd64": "debian-amd64",
}  # fmt: skip
DISTROS = ("debian", "raspbian", "ubuntu")


def host_arch() -> Arch | None:
    """This machine's arch, when it is one dockerarch knows: its engine builds that natively."""
    key = ARCH_ALIASES.get(platform.machine().lower())
    return ARCHES[key] if key else None


def resolve_arch(name: str) -> Arch:
    key = ARCH_ALIASES.get(name.strip().lower())
    if key is None:
        raise UsageError(
            f"Unknown arch '{name}'.{did_you_mean(name.lower(), ARCH_ALIASES)}",
            fix=f"Valid arches: {', '.join(sorted(ARCH_ALIASES))} (aliases of armv7, aarch64 "
            "and amd64).",
        )
    return ARCHES[key]


@dataclass(frozen=True, kw_only=True)
class BoardTarget:
    name: str
    description: str
    arch: Arch
    distro: str
    suite: str
    mirror: str | None  # "host": the host's Debian mirror; None: the user must name one
    keyring: str
    python: str
    gcc: int
    glibc: str
    cpu_flags: str
    base_image: str
    # The amd64 target whose suite gives hybrid builds their cross compilers (gcc of the same
    # major version): debian-amd64 (bookworm) unless a target of a newer suite names its own.
    toolchain: str
    source: str  # the file(s) it was read from
    # The suite's Python as its markers name it (python_full_version: bookworm's 3.11.2); one
    # that is not of ``python`` (a target that extends another with a newer Python) is X.Y.0
    python_full: str = ""

    @property
    def python_full_version(self) -> str:
        full = self.python_full
        return full if full.startswith(f"{self.python}.") else f"{self.python}.0"

    @property
    def platform(self) -> str:
        return self.arch.platform

    @property
    def debian_arch(self) -> str:
        return self.arch.debian_arch

    @property
    def triplet(self) -> str:
        return self.arch.triplet

    @property
    def wheel_tag(self) -> str:
        return self.arch.wheel_tag

    def template_vars(self) -> dict[str, Any]:
        """What Dockerfile templates see as ``target``."""
        return {
            "name": self.name,
            "arch": self.arch.name,
            "platform": self.platform,
            "debian_arch": self.debian_arch,
            "triplet": self.triplet,
            "wheel_tag": self.wheel_tag,
            "distro": self.distro,
            "suite": self.suite,
            "base_image": self.base_image,
            "python": self.python,
            "gcc": self.gcc,
            "glibc": self.glibc,
            "cpu_flags": self.cpu_flags,
            "toolchain": self.toolchain,
        }

    def resolved(self) -> dict[str, str]:
        """Every value, as `dockerarch targets show` prints it."""
        mirror = {
            "host": "the host's Debian mirror (from its apt sources)",
            None: f"not set: pass --mirror URI, or set targets.{self.name}.mirror in targets.yaml",
        }.get(self.mirror, self.mirror or "")
        values = {key: str(value) for key, value in self.template_vars().items()}
        return {
            **values,
            "description": self.description,
            "mirror": mirror,
            "keyring": self.keyring,
            "source": self.source,
        }


FIELDS = (
    "description", "arch", "distro", "suite", "mirror", "keyring", "python", "gcc", "glibc",
    "cpu_flags", "base_image", "toolchain", "python_full",
)  # fmt: skip
REQUIRED = tuple(
    f for f in FIELDS if f not in ("base_image", "description", "toolchain", "python_full")
)
DEFAULT_TOOLCHAIN = "debian-amd64"
_PATTERNS = {
    "suite": re.compile(r"^[a-z][a-z0-9-]*$"),
    "keyring": re.compile(r"^/[A-Za-z0-9._/+-]+$"),
    "python": re.compile(r"^3\.\d{1,2}$"),
    "python_full": re.compile(r"^3\.\d{1,2}\.\d{1,3}$"),
    "glibc": re.compile(r"^2\.\d{1,2}$"),
    "cpu_flags": re.compile(r"^(-[A-Za-z0-9][A-Za-z0-9=.+_-]*)( -[A-Za-z0-9][A-Za-z0-9=.+_-]*)*$"),
    "mirror": re.compile(r"^(host|(https?|file)://[A-Za-z0-9._~:/%+@-]+)$"),
    "base_image": re.compile(r"^[a-z0-9][a-z0-9._/:-]*(@sha256:[0-9a-f]{64})?$"),
    "description": re.compile(r"^[^\n`$;\\]*$"),
    "toolchain": re.compile(r"^[a-z0-9][a-z0-9-]*$"),
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def _check_field(name: str, key: str, value: Any, source: Path) -> Any:
    where = f"targets.{name}.{key}"
    if key == "arch":
        try:
            return resolve_arch(str(value)).name
        except UsageError as exc:
            raise ConfigError(f"'{where}' in {source}: {exc.problem}", fix=exc.fix) from exc
    if key == "gcc":
        if isinstance(value, bool) or not isinstance(value, int) or not 4 <= value <= 99:
            raise ConfigError(f"'{where}' in {source} must be gcc's major version, like 12")
        return value
    if key == "distro":
        if value not in DISTROS:
            raise ConfigError(
                f"'{where}' in {source} is {value!r}.{did_you_mean(str(value), DISTROS)}",
                fix=f"Valid distros: {', '.join(DISTROS)}.",
            )
        return value
    if key == "mirror" and value is None:
        return None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ConfigError(f"'{where}' in {source} must be a string")
    text = str(value)
    pattern = _PATTERNS.get(key)
    if pattern is not None and not pattern.match(text):
        raise ConfigError(
            f"'{where}' in {source} is {text!r}, which is not a valid {key.replace('_', ' ')}"
        )
    return text


def _read(path: Path) -> dict[str, dict[str, Any]]:
    top = require_mapping(load_yaml(path), "", path)
    reject_unknown(top, ["targets"], "", path)
    section = require_mapping(top.get("targets"), "targets", path)
    entries: dict[str, dict[str, Any]] = {}
    for name, raw in section.items():
        name = str(name)
        if not _NAME.match(name):
            raise ConfigError(
                f"Target name '{name}' in {path} is not lowercase letters, digits and dashes"
            )
        body = require_mapping(raw, f"targets.{name}", path)
        reject_unknown(body, [*FIELDS, "extends"], f"targets.{name}", path)
        entries[name] = {
            key: (value if key == "extends" else _check_field(name, key, value, path))
            for key, value in body.items()
        }
    return entries


def project_targets_file() -> Path | None:
    env = os.environ.get("DOCKERARCH_TARGETS")
    if env:
        path = Path(env)
        if not path.is_file():
            raise ConfigError(f"DOCKERARCH_TARGETS names {path}, which does not exist")
        return path
    local = Path.cwd() / PROJECT_TARGETS
    return local if local.is_file() else None


def load_targets(project_file: Path | None = None) -> dict[str, BoardTarget]:
    """Built-in targets with the project's overrides and additions applied."""
    merged: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    _merge(merged, sources, BUILTIN_TARGETS)
    project_file = project_file or project_targets_file()
    if project_file is not None:
        _merge(merged, sources, project_file)
    return {name: _build(name, body, sources[name]) for name, body in merged.items()}


def _merge(merged: dict[str, dict[str, Any]], sources: dict[str, str], path: Path) -> None:
    """The entries of ``path`` over ``merged``: a known name changes the fields it gives, a new
    one gives every field or starts from a target named earlier (`extends`)."""
    for name, body in _read(path).items():
        parent = body.pop("extends", None)
        if parent is not None:
            if parent not in merged:
                raise ConfigError(
                    f"'targets.{name}.extends' in {path} names '{parent}', "
                    f"which is not a target.{did_you_mean(str(parent), merged)}"
                )
            base = dict(merged[parent])
        else:
            base = dict(merged.get(name, {}))
        sources[name] = f"{sources[name]} + {path}" if name in sources else str(path)
        merged[name] = {**base, **body}


def _build(name: str, body: Mapping[str, Any], source: str) -> BoardTarget:
    missing = [key for key in REQUIRED if key not in body]
    if missing:
        raise ConfigError(
            f"Target '{name}' ({source}) lacks {', '.join(missing)}",
            fix="Give every field, or start from another target with `extends: NAME`.",
        )
    values = {key: body[key] for key in FIELDS if key in body}
    values.setdefault("description", name)
    values.setdefault("base_image", f"dockerarch/base/{name}:{body['suite']}")
    values.setdefault("toolchain", DEFAULT_TOOLCHAIN)
    values["arch"] = ARCHES[values["arch"]]
    assert {f.name for f in fields(BoardTarget)} == {*FIELDS, "name", "source"}
    return BoardTarget(name=name, source=source, **values)


def find_target(targets: Mapping[str, BoardTarget], name: str) -> BoardTarget:
    if name in targets:
        return targets[name]
    raise UsageError(
        f"Unknown target '{name}'.{did_you_mean(name, targets)}",
        fix=f"Valid targets: {', '.join(sorted(targets))} (dockerarch targets lists them).",
    )


def select_targets(
    targets: Mapping[str, BoardTarget],
    *,
    arch: str | None,
    target: str | None,
    for_arch: Mapping[str, str] | None = None,
) -> list[BoardTarget]:
    """The targets named by ``--target T`` or ``--arch A`` (each may be a comma list);
    ``for_arch`` is a recipe's own choice of target for an arch (torch for armv7: trixie)."""
    if (arch is None) == (target is None):
        raise UsageError(
            "Give exactly one of --arch and --target",
            fix="For example --arch armv7, or --target rpi3 (dockerarch targets lists them).",
        )
    chosen: list[BoardTarget] = []
    if target is not None:
        names = [t.strip() for t in target.split(",") if t.strip()]
        chosen = [find_target(targets, t) for t in names]
    else:
        assert arch is not None
        for a in (a.strip() for a in arch.split(",") if a.strip()):
            name = resolve_arch(a).name
            chosen.append(
                find_target(targets, (for_arch or {}).get(name) or DEFAULT_TARGET_FOR_ARCH[name])
            )
    if not chosen:
        raise UsageError("No target given", fix="For example --arch armv7 or --target rpi3.")
    unique = list(dict.fromkeys(chosen))
    return unique
