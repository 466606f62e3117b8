"""`dockerarch export-img`: the demo's verified aarch64 build becomes a Raspberry Pi 3B card,
made where mounting is impossible (no CAP_SYS_ADMIN, no capability at all), the same bytes the
second time, and booted from the card itself under qemu-system-aarch64 -M raspi3b: the demo's
package imports, the first boot grew the root to the card, the host name and the key are there,
the system powers off. The armv7 build's card, made beside them, boots under qemu-system-arm -M
virt. One card and one boot per arch and run, every check on them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dockerarch import engine
from dockerarch.card import boards, boot, export

from .conftest import REPO, dockerarch

pytestmark = pytest.mark.integration

PASSWORD = "card-test-password"


def unprivileged(*args: str) -> list[str]:
    """argv that runs with no capability at all (bounding set emptied, no new privileges): no
    mount, no loop device, nothing but what any docker user can do."""
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all",
            "--no-new-privs", *args]  # fmt: skip


def export_img(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(unprivileged(sys.executable, "-m", "dockerarch", "export-img", *args),
                          capture_output=True, text=True, cwd=REPO, timeout=timeout, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("key")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(where / "id")], check=True
    )
    (where / "password").write_text(PASSWORD + "\n")
    return where


@pytest.fixture(scope="module")
def cards(demo_dist: tuple[Path, subprocess.CompletedProcess[str]], key: Path,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str], Path]:  # fmt: skip
    """The same aarch64 card made twice, into two directories, and an armv7 card made at the same
    time as they are (two export-img runs on one engine, as a user may start them; their
    system stages, apt under QEMU, share the two cores), each where mounting is impossible. The
    armv7 card is made from a wheel set (`-r`): the demo's own, the image its build installed
    and checked, found by a requirements file asking for what the demo built."""
    out, _ = demo_dist
    # The card tools' base, made once with root's privileges as a machine's set-up makes its
    # bases (export-img without them says so: tests/unit/test_card.py)
    tools = dockerarch("base", "bootstrap", "--target", "trixie-amd64", "--no-push", timeout=3600)
    assert tools.returncode == 0, tools.stderr[-3000:]
    where32 = tmp_path_factory.mktemp("armv7")
    pi32 = where32 / "pi32.img"
    (where32 / "requirements.txt").write_text("zstandard==0.23.0\n")
    errors = (where32 / "export-img.err").open("w")
    armv7 = subprocess.Popen(unprivileged(sys.executable, "-m", "dockerarch", "export-img", "wheel",
                                          "-r", str(where32 / "requirements.txt"), "--name",
                                          "zstandard", "--arch", "armv7", "--out", str(out),
                                          "--hostname", "card-armv7", "--ssh-key",
                                          str(key / "id.pub"), "--password-file",
                                          str(key / "password"), str(pi32)),
                             stdout=subprocess.DEVNULL, stderr=errors, cwd=REPO)  # fmt: skip
    try:
        made = []
        for name in ("first", "second"):
            where = tmp_path_factory.mktemp(name)
            done = export_img("wheel", "--package", "zstandard==0.23.0", "--arch", "aarch64",
                              "--out", str(out), "--hostname", "card-test", "--ssh-key",
                              str(key / "id.pub"), "--password-file", str(key / "password"),
                              str(where / "pi.img"))  # fmt: skip
            assert done.returncode == 0, done.stderr[-4000:]
            made.append((where / "pi.img", done))
        armv7.wait(timeout=3600)
    finally:
        if armv7.poll() is None:
            armv7.send_signal(signal.SIGINT)
            armv7.wait(timeout=120)
        errors.close()
    assert armv7.returncode == 0, (where32 / "export-img.err").read_text()[-4000:]
    return made[0][0], made[1][0], made[0][1], pi32


def test_mounting_is_impossible_where_the_cards_are_made(tmp_path: Path) -> None:
    done = subprocess.run(unprivileged("mount", "-t", "tmpfs", "none", str(tmp_path)),
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode != 0 and not os.path.ismount(tmp_path), done.stderr


def test_the_same_inputs_make_the_same_card_byte_for_byte(
    cards: tuple[Path, Path, object, Path],
) -> None:
    first, second, done, _ = cards
    manifest = json.loads(first.with_name("pi.img.manifest.json").read_text())
    assert (
        manifest["image"]["sha256"]
        == json.loads(second.with_name("pi.img.manifest.json").read_text())["image"]["sha256"]
    )
    assert _sha256(first) == _sha256(second) == manifest["image"]["sha256"]
    assert (
        first.with_name("pi.img.bmap").read_bytes() == second.with_name("pi.img.bmap").read_bytes()
    )
    assert str(first) in done.stdout  # type: ignore[attr-defined]
    # sparse: the file takes far less than its size on disk
    assert first.stat().st_blocks * 512 < first.stat().st_size * 0.9
    # and nowhere else: the steps that held the image are out of BuildKit's cache
    left = [r.description for r in engine.cache_records() if export.RUN_MARKER in r.description]
    assert not left, left


def test_the_card_has_what_a_pi_3b_s_firmware_reads(cards: tuple[Path, Path, object, Path]) -> None:
    card = cards[0]
    manifest = json.loads(card.with_name("pi.img.manifest.json").read_text())
    table = json.loads(subprocess.run(["sfdisk", "--json", str(card)], capture_output=True,
                                      text=True, check=True).stdout)["partitiontable"]  # fmt: skip
    assert table["label"] == "dos" and table["id"] == f"0x{manifest['disk_id']}"
    boot_part, root_part = table["partitions"]
    assert (boot_part["start"], boot_part["type"], boot_part.get("bootable")) == (8192, "c", True)
    assert (
        root_part["type"] == "83" and root_part["start"] == boot_part["start"] + boot_part["size"]
    )
    fat = f"{card}@@{boot_part['start'] * 512}"
    listing = subprocess.run(["mdir", "-b", "-i", fat, "::"], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    for name in ("bootcode.bin", "start.elf", "fixup.dat", "config.txt", "cmdline.txt",
                 "bcm2837-rpi-3-b.dtb"):  # fmt: skip
        assert f"::/{name}" in listing, listing
    config = _mtype(fat, "config.txt")
    assert (
        "arm_64bit=1" in config
        and "kernel=vmlinuz-" in config
        and "initramfs initrd.img-" in config
    )
    cmdline = _mtype(fat, "cmdline.txt")
    assert (
        f"root=PARTUUID={manifest['disk_id']}-02" in cmdline and "console=ttyS1,115200" in cmdline
    )
    root = f"{card}?offset={root_part['start'] * 512}"
    assert _debugfs(root, "cat /etc/hostname") == "card-test\n"
    fstab = _debugfs(root, "cat /etc/fstab")
    assert f"PARTUUID={manifest['disk_id']}-01\t/boot/firmware\tvfat" in fstab
    assert _debugfs(root, "cat /etc/machine-id") == ""  # systemd makes it on the first boot
    assert "ssh_host_" not in _debugfs(root, "ls -l /etc/ssh")  # made on the first boot
    assert manifest["partitions"][1]["sha256"] and manifest["tools"]["mke2fs"].startswith(
        "mke2fs 1.47"
    )


def test_the_card_boots_under_qemu_and_is_what_was_asked(cards: tuple[Path, Path, object, Path], key: Path,
                                                         tmp_path: Path) -> None:  # fmt: skip
    card = cards[0]
    commands = [
        "python3 -c 'import zstandard; print(zstandard.__version__)'",
        "hostname",
        "cat ~/.ssh/authorized_keys",
        "cat /var/lib/dockerarch/firstboot-done",
        "findmnt -bno SIZE /",
        "sudo cat /sys/block/mmcblk0/size",
        "sudo systemctl start ssh.service && systemctl is-active ssh.service",  # it may be starting
        "ls /etc/ssh/ssh_host_ed25519_key.pub /etc/ssh/ssh_host_rsa_key.pub",
        "readlink /etc/resolv.conf",
        "systemctl is-enabled systemd-resolved systemd-timesyncd systemd-networkd",
    ]
    said: list[str] = []
    booted = boot.boot(card, boards.load_boards()["rpi3b"], "aarch64", user="pi", password=PASSWORD,
                       commands=commands, work=tmp_path, say=said.append, timeout=900)  # fmt: skip
    out = booted.outputs
    assert out[commands[0]] == "0.23.0"
    assert out[commands[1]] == "card-test"
    assert out[commands[2]].strip() == (key / "id.pub").read_text().strip()
    assert out[commands[3]]
    # the first boot grew the root to the end of the (larger) emulated card
    manifest = json.loads(card.with_name("pi.img.manifest.json").read_text())
    assert int(out[commands[4]]) > manifest["partitions"][1]["size_mib"] * 2**20
    assert int(out[commands[5]]) * 512 == boot.card_size(card.stat().st_size)
    assert "dockerarch-firstboot: root /dev/mmcblk0p2 grown" in booted.console
    assert out[commands[6]] == "active"
    # a board on a network gets its DNS servers and its clock (it has no RTC) from it
    assert out[commands[8]] == "../run/systemd/resolve/stub-resolv.conf"
    assert out[commands[9]].split() == ["enabled"] * 3
    print(
        f"\nboot: login prompt after {booted.seconds_to_login:.0f} s, powered off after "
        f"{booted.seconds_to_poweroff:.0f} s"
    )


def test_an_armv7_card_boots_under_qemu(cards: tuple[Path, Path, object, Path], tmp_path: Path) -> None:  # fmt: skip
    """The armv7 userland with Debian's armmp kernel, read out of the card's own boot partition,
    on QEMU's virt machine (QEMU has no 32-bit raspi3b; the card's initramfs carries virtio_blk
    beside the Pi's SD host drivers). The aarch64 boot above checks everything the card
    promises on the Pi's own machine; this one that the armv7 card, made from a wheel set,
    boots and runs the set's armv7 wheel, what its first boot did, and that the system waits
    for its devices (the boot partition, the serial console) as long as an emulated kernel
    needs."""
    card = cards[3]
    inputs = json.loads(card.with_name("pi32.img.manifest.json").read_text())["inputs"]
    assert inputs["image"] == "dockerarch/zstandard:set-debian-armv7"  # the set's, as checked
    commands = [
        "python3 -c 'import zstandard, platform; print(zstandard.__version__, platform.machine())'",
        "hostname",
        "cat /var/lib/dockerarch/firstboot-done",
        "findmnt -no FSTYPE /boot/firmware",
        "systemctl show --value -p JobRunningTimeoutUSec dev-ttyAMA0.device",
    ]
    booted = boot.boot(card, boards.load_boards()["rpi3b"], "armv7", user="pi", password=PASSWORD,
                       commands=commands, work=tmp_path, say=lambda _: None, timeout=1200)  # fmt: skip
    assert booted.outputs[commands[0]] == "0.23.0 armv7l"
    assert booted.outputs[commands[1]] == "card-armv7" and booted.outputs[commands[2]]
    assert booted.outputs[commands[3]] == "vfat"
    assert booted.outputs[commands[4]] == "10min"  # the card's, for every device it waits for
    assert "dockerarch-firstboot: root /dev/vda2 grown" in booted.console
    print(
        f"\narmv7 boot: login prompt after {booted.seconds_to_login:.0f} s, powered off after "
        f"{booted.seconds_to_poweroff:.0f} s"
    )


def test_bad_input_is_one_paragraph_before_anything_is_made(cards: tuple[Path, Path, object, Path], key: Path,
                                                            tmp_path: Path) -> None:  # fmt: skip
    existing = cards[0]
    cases = [
        (
            [
                "--image",
                "dockerarch/none:1",
                "--target",
                "debian-aarch64",
                "--ssh-key",
                str(key / "id.pub"),
                str(existing),
            ],
            "exists",
        ),
        (
            [
                "--image",
                "dockerarch/none:1",
                "--target",
                "pynq-zu",
                "--ssh-key",
                str(key / "id.pub"),
                str(tmp_path / "x.img"),
            ],
            "cannot be made with the pynq-zu userland",
        ),
        (
            [
                "--image",
                "dockerarch/none:1",
                "--board",
                "pi3",
                "--ssh-key",
                str(key / "id.pub"),
                str(tmp_path / "x.img"),
            ],
            "Unknown board 'pi3'",
        ),
        (
            [
                "--image",
                "dockerarch/none:1",
                "--target",
                "debian-aarch64",
                "--ssh-key",
                str(key / "id"),
                str(tmp_path / "x.img"),
            ],
            "is a private key",
        ),
        (
            [
                "--image",
                "dockerarch/none:1",
                "--target",
                "debian-aarch64",
                "--ssh-key",
                str(key / "id.pub"),
                str(tmp_path / "x.img"),
            ],
            "There is no local image dockerarch/none:1",
        ),
    ]
    for args, words in cases:
        done = dockerarch("export-img", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert words in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    assert not list(tmp_path.iterdir())


def test_an_interrupted_card_leaves_nothing_under_its_names(
    demo_dist: tuple[Path, subprocess.CompletedProcess[str]],
    key: Path,
    tmp_path: Path,
) -> None:
    out, _ = demo_dist
    with subprocess.Popen(
        [sys.executable, "-m", "dockerarch", "export-img", "wheel", "--package", "zstandard==0.23.0",
         "--arch", "aarch64", "--out", str(out), "--hostname", "cut-short", "--ssh-key",
         str(key / "id.pub"), str(tmp_path / "pi.img")],
        cwd=REPO, stderr=subprocess.PIPE, text=True,
    ) as started:  # fmt: skip
        assert started.stderr is not None
        for line in started.stderr:  # stopped while the card is being assembled
            if "partitions written" in line or "host name, user, key" in line:
                break
        time.sleep(3)
        started.send_signal(signal.SIGKILL)
        started.wait(timeout=60)
    assert started.returncode == -signal.SIGKILL  # killed, not finished
    assert not any(p.name.startswith("pi.img") for p in tmp_path.iterdir())


def test_the_scripts_a_card_s_build_runs_are_shellcheck_clean() -> None:
    scripts = [REPO / "dockerarch" / "data" / "card" / name
               for name in ("system", "boot", "customise", "assemble", "firstboot")]  # fmt: skip
    done = subprocess.run(["shellcheck", "--shell=sh", *map(str, scripts)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _mtype(fat: str, name: str) -> str:
    return subprocess.run(["mtype", "-i", fat, f"::{name}"], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def _debugfs(device: str, request: str) -> str:
    assert shutil.which("debugfs")
    return subprocess.run(["debugfs", "-R", request, device], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


KERNEL_RELEASE = "6.1.5-xilinx-v2023.1"


def vendor_image(where: Path, module: bytes, *, name: str = "pynq.img") -> tuple[Path, Path]:
    """A stand-in for PYNQ's SD-card image, made as its builder lays one out (a FAT boot
    partition with BOOT.BIN, image.ub and boot.scr; an ext4 root with the kernel's modules and
    firmware), zipped as it is downloaded: (the zip, its boot partition's bytes)."""
    where.mkdir(parents=True, exist_ok=True)
    boot = where / "boot.fat"
    subprocess.run(["mkfs.fat", "-C", "-n", "PYNQ", str(boot), str(48 * 1024)], check=True,
                   capture_output=True)  # fmt: skip
    for file, data in (
        ("BOOT.BIN", b"boot image"),
        ("image.ub", b"FIT image"),
        ("boot.scr", b"script"),
    ):
        (where / file).write_bytes(data * 100)
        subprocess.run(["mcopy", "-i", str(boot), str(where / file), "::"], check=True)
    tree = where / "root"
    modules = tree / "usr/lib/modules" / KERNEL_RELEASE
    (modules / "kernel/drivers").mkdir(parents=True)
    (modules / "kernel/drivers/pynq.ko").write_bytes(module)
    (modules / "modules.dep").write_text("kernel/drivers/pynq.ko:\n")
    (tree / "usr/lib/firmware").mkdir(parents=True)
    (tree / "usr/lib/firmware/pynq-fw.bin").write_bytes(b"firmware")
    (tree / "lib").symlink_to("usr/lib")
    root = where / "root.ext4"
    subprocess.run(["mke2fs", "-q", "-t", "ext4", "-d", str(tree), str(root), "64M"], check=True)
    image = where / name
    subprocess.run(["truncate", "-s", f"{1 + 48 + 64}M", str(image)], check=True)
    subprocess.run(["sfdisk", "--quiet", str(image)], input="label: dos\nlabel-id: 0x5e1ec7ed\nstart=2048, size=98304, "
                   "type=c, bootable\nstart=100352, type=83\n", text=True, check=True)  # fmt: skip
    for part, seek in ((boot, 1), (root, 49)):
        subprocess.run(["dd", f"if={part}", f"of={image}", "bs=1M", f"seek={seek}", "conv=notrunc",
                        "status=none"], check=True)  # fmt: skip
    archive = image.with_name(image.name + ".zip")
    import zipfile

    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as packed:
        packed.write(image, image.name)
    return archive, boot


def _wheel_library(out: Path, target: str) -> bytes:
    import zipfile

    (wheel,) = (out / target).glob("zstandard-0.23.0/*.whl")
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".so"))
        return archive.read(name)


def test_a_pynq_card_takes_the_vendor_s_boot_partition_byte_for_byte(
    demo_dist: tuple[Path, subprocess.CompletedProcess[str]],
    key: Path,
    tmp_path: Path,
) -> None:
    out, _ = demo_dist
    archive, boot_fat = vendor_image(tmp_path / "vendor", _wheel_library(out, "debian-aarch64"))
    card = tmp_path / "pynq.img"
    done = export_img("wheel", "--package", "zstandard==0.23.0", "--board", "pynq-zu", "--target",
                      "debian-aarch64", "--out", str(out), "--hostname", "pynq-1", "--ssh-key",
                      str(key / "id.pub"), "--boot-from", str(archive), str(card))  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    manifest = json.loads(card.with_name("pynq.img.manifest.json").read_text())
    assert manifest["inputs"]["boot_from"]["sha256"] == _sha256(archive)
    assert manifest["inputs"]["boot_from"]["kernel"] == KERNEL_RELEASE
    # the vendor's disk id kept: its boot files may name the root by PARTUUID
    assert manifest["disk_id"] == "5e1ec7ed" and manifest["root_partuuid"] == "5e1ec7ed-02"
    table = json.loads(subprocess.run(["sfdisk", "--json", str(card)], capture_output=True,
                                      text=True, check=True).stdout)["partitiontable"]  # fmt: skip
    boot_part, root_part = table["partitions"]
    # the vendor's boot partition as it was, where its boot ROM looks; the root is partition 2
    with card.open("rb") as handle:
        handle.seek(boot_part["start"] * 512)
        assert handle.read(boot_part["size"] * 512) == boot_fat.read_bytes()
    root = f"{card}?offset={root_part['start'] * 512}"
    listing = _debugfs(root, f"ls -p /usr/lib/modules/{KERNEL_RELEASE}/kernel/drivers")
    assert "/pynq.ko/" in listing
    assert _debugfs(root, "cat /usr/lib/firmware/pynq-fw.bin") == "firmware"
    assert "\t/boot\tvfat" in _debugfs(root, "cat /etc/fstab")
    assert _debugfs(root, "cat /etc/hostname") == "pynq-1\n"


def test_a_vendor_image_that_is_none_is_truncated_or_of_another_arch_is_refused(
    demo_dist: tuple[Path, subprocess.CompletedProcess[str]],
    key: Path,
    tmp_path: Path,
) -> None:
    out, _ = demo_dist
    other_arch, _ = vendor_image(tmp_path / "armv7", _wheel_library(out, "debian-armv7"))
    truncated_dir = tmp_path / "cut"
    _, _ = vendor_image(truncated_dir, _wheel_library(out, "debian-aarch64"))
    cut = truncated_dir / "pynq.img"
    os.truncate(cut, 60 * 2**20)  # ends inside the root partition
    noise = tmp_path / "noise.img"
    noise.write_bytes(os.urandom(2**20))
    common = ["wheel", "--package", "zstandard==0.23.0", "--board", "pynq-zu", "--target", "debian-aarch64",
              "--out", str(out), "--ssh-key", str(key / "id.pub")]  # fmt: skip
    cases = [
        ([], "needs the vendor's boot partition"),
        (["--boot-from", str(noise)], "is not a disk image"),
        (["--boot-from", str(cut)], "is truncated or corrupt"),
        (["--boot-from", str(other_arch)], "its kernel is for armv7, not aarch64"),
    ]
    for args, words in cases:
        done = dockerarch("export-img", *common, *args, str(tmp_path / "x.img"))
        assert done.returncode == 2, (args, done.stderr[-2000:])
        assert words in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    assert not any(p.name.startswith("x.img") for p in tmp_path.iterdir())


def test_a_size_too_small_for_the_contents_names_the_size_needed(
    demo_dist: tuple[Path, subprocess.CompletedProcess[str]],
    key: Path,
    tmp_path: Path,
    cards: tuple[Path, Path, object, Path],
) -> None:
    out, _ = demo_dist
    needed = json.loads(cards[0].with_name("pi.img.manifest.json").read_text())["needed_mib"]
    done = dockerarch("export-img", "wheel", "--package", "zstandard==0.23.0", "--arch", "aarch64",
                      "--out", str(out), "--hostname", "card-test", "--ssh-key", str(key / "id.pub"),
                      "--size", "1G", str(tmp_path / "small.img"), timeout=1800)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    said = " ".join(done.stderr.split())
    import re

    asked = re.search(r"contents need (\d+) MiB, more than --size gives", said)
    assert asked and 1024 < int(asked.group(1)) and abs(int(asked.group(1)) - needed) <= 8, said
    assert not list(tmp_path.iterdir())
