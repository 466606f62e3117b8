"""Artifact verification: machine, float ABI, wheel tag and symbol versions, on wheels made here
from the in-memory ARM probe programs."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from dockerarch import arm_probe, artifacts, elf
from dockerarch.targets import load_targets

TARGETS = load_targets()


def make_wheel(directory: Path, tag: str, program: bytes | None, name: str = "demo") -> Path:
    path = directory / f"{name}-1.0-cp311-cp311-{tag}.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", "")
        if program is not None:
            wheel.writestr(f"{name}/_speedups.cpython-311-arm.so", program)
        wheel.writestr(f"{name}-1.0.dist-info/top_level.txt", f"{name}\n")
    return path


def soft_float(program: bytes) -> bytes:
    data = bytearray(program)
    data[36:40] = (0x05000200).to_bytes(4, "little")
    return bytes(data)


@pytest.mark.parametrize(
    ("target", "tag", "arch"),
    [("debian-armv7", "linux_armv7l", "armv7"), ("debian-aarch64", "linux_aarch64", "aarch64"),
     ("pynq-z1", "linux_armv7l", "armv7"), ("pynq-zu", "linux_aarch64", "aarch64")],
)  # fmt: skip
def test_a_wheel_for_the_target_passes(target: str, tag: str, arch: str, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, tag, arm_probe.probe_executable(arch))
    report = artifacts.verify(wheel, TARGETS[target])
    assert (report.kind, report.elf_files, report.top_level) == ("wheel", 1, ("demo",))
    assert len(report.sha256) == 64 and report.size == wheel.stat().st_size


def test_an_aarch64_wheel_is_refused_for_armv7(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "linux_armv7l", arm_probe.probe_executable("aarch64"))
    with pytest.raises(artifacts.VerificationError) as err:
        artifacts.verify(wheel, TARGETS["debian-armv7"])
    assert str(err.value).startswith(
        f"{wheel.name}: demo/_speedups.cpython-311-arm.so is aarch64 code, but target "
        "'debian-armv7' is armv7"
    )
    assert err.value.exit_code == 7


def test_soft_float_code_is_refused_for_armhf(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "linux_armv7l", soft_float(arm_probe.probe_executable("armv7")))
    with pytest.raises(artifacts.VerificationError, match="uses the soft-float ABI"):
        artifacts.verify(wheel, TARGETS["rpi3"])


@pytest.mark.parametrize("tag", ["linux_armv8l", "linux_aarch64", "manylinux2014_armv7l"])
def test_a_wrong_platform_tag_is_refused(tag: str, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, tag, arm_probe.probe_executable("armv7"))
    with pytest.raises(artifacts.VerificationError, match=f"is tagged {tag}, but target"):
        artifacts.verify(wheel, TARGETS["debian-armv7"])


@pytest.mark.parametrize(
    ("tag", "fits"),
    [("manylinux2014_armv7l", True), ("manylinux_2_36_armv7l", True),
     ("manylinux_2_31_armv7l.musllinux_1_1_armv7l", True), ("manylinux_2_38_armv7l", False),
     ("manylinux_2_17_aarch64", False), ("musllinux_1_1_armv7l", False)],
)  # fmt: skip
def test_a_fetched_wheel_may_carry_a_manylinux_tag_the_targets_glibc_accepts(
    tag: str, fits: bool, tmp_path: Path
) -> None:
    """Bookworm's glibc is 2.36: manylinux up to 2_36 installs there; a built one never claims it."""
    wheel = make_wheel(tmp_path, tag, arm_probe.probe_executable("armv7"))
    if fits:
        assert artifacts.verify(wheel, TARGETS["debian-armv7"], fetched=True).elf_files == 1
    else:
        with pytest.raises(artifacts.VerificationError, match="is tagged"):
            artifacts.verify(wheel, TARGETS["debian-armv7"], fetched=True)


def test_compiled_code_in_an_any_wheel_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "any", arm_probe.probe_executable("armv7"))
    with pytest.raises(
        artifacts.VerificationError, match="holds 1 compiled files but is tagged 'any'"
    ):
        artifacts.verify(wheel, TARGETS["debian-armv7"])


def test_too_new_symbol_versions_name_the_file_and_symbol() -> None:
    target = TARGETS["debian-armv7"]  # glibc 2.36, gcc 12 (GLIBCXX_3.4.30)
    ok = elf.ElfFacts(machine="EM_ARM", elf_class=32, hard_float=True,
                      needs={"GLIBC": [(2, 4), (2, 34)], "GLIBCXX": [(3, 4, 30)]})  # fmt: skip
    artifacts.check_elf(ok, target, "a.whl", "a/x.so")
    for library, version, shown in (("GLIBC", (2, 38), "GLIBC_2.38"),
                                    ("GLIBCXX", (3, 4, 32), "GLIBCXX_3.4.32")):  # fmt: skip
        facts = elf.ElfFacts(machine="EM_ARM", elf_class=32, hard_float=True,
                             needs={library: [(2, 4), version]})  # fmt: skip
        with pytest.raises(artifacts.VerificationError) as err:
            artifacts.check_elf(facts, target, "a.whl", "a/x.so")
        assert f"a.whl: a/x.so needs {shown}, but target 'debian-armv7' ships" in str(err.value)


def test_tarballs_and_debs_are_searched_for_elf_files(tmp_path: Path) -> None:
    program = arm_probe.probe_executable("aarch64")
    tarball = tmp_path / "vaccel.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo("usr/local/lib/libvaccel.so")
        info.size = len(program)
        tar.addfile(info, io.BytesIO(program))
    assert artifacts.verify(tarball, TARGETS["debian-aarch64"]).elf_files == 1
    with pytest.raises(artifacts.VerificationError, match=r"libvaccel\.so is aarch64 code"):
        artifacts.verify(tarball, TARGETS["debian-armv7"])
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        info = tarfile.TarInfo("./usr/lib/libqpu.so")
        info.size = len(program)
        tar.addfile(info, io.BytesIO(program))
    payload = data.getvalue()
    member = f"{'data.tar.xz':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(payload):<10}`\n".encode()
    deb = tmp_path / "libqpu_1.0_arm64.deb"
    deb.write_bytes(b"!<arch>\n" + member + payload + (b"\n" if len(payload) % 2 else b""))
    assert artifacts.verify(deb, TARGETS["debian-aarch64"]).kind == "deb"


def test_a_damaged_wheel_is_reported(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-cp311-cp311-linux_armv7l.whl"
    wheel.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(artifacts.VerificationError, match="is a damaged archive"):
        artifacts.verify(wheel, TARGETS["debian-armv7"])


def test_top_level_names_without_top_level_txt_are_modules_only(tmp_path: Path) -> None:
    # meson-python and scikit-build-core write no top_level.txt: the names come from the files,
    # and a data file installed at the top (me_asked.txt) or a vendored-library directory is
    # not something to import in the smoke test.
    path = tmp_path / "me-1.0-cp311-cp311-linux_aarch64.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name in ("_me.cpython-311-aarch64-linux-gnu.so", "helper.py", "me_asked.txt",
                     "pkg/__init__.py", "me.libs/libx.so.1", "me-1.0.dist-info/RECORD",
                     "me-1.0.data/scripts/tool", "LICENSE"):  # fmt: skip
            wheel.writestr(name, "")
    assert artifacts._top_level(path) == ("_me", "helper", "pkg")
