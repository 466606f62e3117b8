from __future__ import annotations

from pathlib import Path

import pytest

from dockerarch.errors import ConfigError, UsageError
from dockerarch.targets import load_targets, resolve_arch, select_targets

EXPECTED = {
    # name: (arch, platform, debian arch, triplet, distro, suite, gcc, glibc)
    "debian-armv7": ("armv7", "linux/arm/v7", "armhf", "arm-linux-gnueabihf", "debian", "bookworm", 12, "2.36"),
    "debian-aarch64": ("aarch64", "linux/arm64", "arm64", "aarch64-linux-gnu", "debian", "bookworm", 12, "2.36"),
    "rpi3": ("armv7", "linux/arm/v7", "armhf", "arm-linux-gnueabihf", "raspbian", "bookworm", 12, "2.36"),
    "pynq-zu": ("aarch64", "linux/arm64", "arm64", "aarch64-linux-gnu", "ubuntu", "jammy", 11, "2.35"),
    "pynq-z1": ("armv7", "linux/arm/v7", "armhf", "arm-linux-gnueabihf", "ubuntu", "jammy", 11, "2.35"),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _no_project_targets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DOCKERARCH_TARGETS", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builtin_targets(name: str) -> None:
    t = load_targets()[name]
    got = (t.arch.name, t.platform, t.debian_arch, t.triplet, t.distro, t.suite, t.gcc, t.glibc)
    assert got == EXPECTED[name]
    assert t.base_image == f"dockerarch/base/{name}:{t.suite}"
    assert set(t.resolved()) >= {"mirror", "keyring", "python", "cpu_flags", "wheel_tag"}


def test_board_cpu_flags() -> None:
    targets = load_targets()
    assert "-mcpu=cortex-a53" in targets["rpi3"].cpu_flags
    assert "-mcpu=cortex-a53" in targets["pynq-zu"].cpu_flags
    assert (
        "-mcpu=cortex-a9" in targets["pynq-z1"].cpu_flags
        and "-mfpu=neon" in targets["pynq-z1"].cpu_flags
    )
    assert all(
        "-mfloat-abi=hard" in t.cpu_flags for t in targets.values() if t.arch.name == "armv7"
    )


def test_debian_targets_use_the_host_mirror_others_must_be_named() -> None:
    targets = load_targets()
    assert targets["debian-armv7"].mirror == "host"
    assert targets["rpi3"].mirror is None
    assert "--mirror" in targets["rpi3"].resolved()["mirror"]


@pytest.mark.parametrize(
    ("alias", "arch"),
    [("armv7", "armv7"), ("armhf", "armv7"), ("arm", "armv7"), ("ARMV7L", "armv7"),
     ("aarch64", "aarch64"), ("arm64", "aarch64"), ("linux/arm64", "aarch64")],
)  # fmt: skip
def test_arch_aliases(alias: str, arch: str) -> None:
    assert resolve_arch(alias).name == arch


def test_unknown_arch_suggests() -> None:
    with pytest.raises(UsageError) as caught:
        resolve_arch("arm46")
    assert (
        "Unknown arch 'arm46'" in caught.value.message and "Valid arches:" in caught.value.message
    )


def test_select_by_arch_list_and_target() -> None:
    targets = load_targets()
    chosen = select_targets(targets, arch="armv7, arm64", target=None)
    assert [t.name for t in chosen] == ["debian-armv7", "debian-aarch64"]
    assert [t.name for t in select_targets(targets, arch=None, target="rpi3,pynq-zu")] == [
        "rpi3",
        "pynq-zu",
    ]
    assert len(select_targets(targets, arch="armhf,armv7", target=None)) == 1
    with pytest.raises(UsageError, match="exactly one of --arch and --target"):
        select_targets(targets, arch="armv7", target="rpi3")
    with pytest.raises(UsageError, match="exactly one"):
        select_targets(targets, arch=None, target=None)


def test_project_overrides_and_extends(tmp_path: Path) -> None:
    (tmp_path / "targets.yaml").write_text(
        "targets:\n"
        "  rpi3:\n    mirror: http://mirror.example.invalid/raspbian\n"
        "  rpi4:\n    extends: debian-aarch64\n    description: Pi 4, 64-bit\n"
        "    cpu_flags: -mcpu=cortex-a72\n"
    )
    targets = load_targets()
    assert targets["rpi3"].mirror == "http://mirror.example.invalid/raspbian"
    assert targets["rpi3"].distro == "raspbian"  # the rest stays built-in
    assert str(tmp_path / "targets.yaml") in targets["rpi3"].source
    rpi4 = targets["rpi4"]
    assert rpi4.arch.name == "aarch64" and rpi4.cpu_flags == "-mcpu=cortex-a72"
    assert rpi4.base_image == "dockerarch/base/rpi4:bookworm"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("targets:\n  rpi3:\n    gcc_version: 12\n", "Unknown key 'targets.rpi3.gcc_version'"),
        ("targets:\n  rpi3:\n    arch: mips\n", "'targets.rpi3.arch'"),
        ("targets:\n  rpi3:\n    gcc: twelve\n", "must be gcc's major version"),
        ("targets:\n  rpi3:\n    cpu_flags: -O2; rm -rf /\n", "not a valid cpu flags"),
        ("targets:\n  new:\n    arch: armv7\n", "Target 'new'"),
        ("targets:\n  new:\n    extends: debain-armv7\n", "Did you mean 'debian-armv7'?"),
        ("targets:\n  rpi3:\n    distro: raspian\n", "Did you mean 'raspbian'?"),
        ("target:\n  rpi3: {}\n", "Unknown key 'target'"),
    ],
)
def test_bad_project_targets(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "targets.yaml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_targets()
    assert message in caught.value.message
