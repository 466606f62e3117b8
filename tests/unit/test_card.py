"""export-img's pure parts: a card's ids from its inputs, its options checked before the engine
is asked anything, the boards as data."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockerarch.card import boards, export, layout
from dockerarch.errors import ConfigError, UsageError
from dockerarch.targets import load_targets

TARGETS = load_targets()
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBv3c8Z1mJpJ3T8d5l4QmKq9pQ2l0yE0Yx7Yv1b2c3d4 me@desk\n"


def request(tmp_path: Path, **changes: object) -> export.CardRequest:
    values: dict[str, object] = {
        "board": boards.load_boards()["rpi3b"], "target": TARGETS["debian-aarch64"],
        "image": "dockerarch/x:1", "out": tmp_path / "pi.img", "hostname": "pi-1", "user": "pi",
        "ssh_keys": KEY,
    }  # fmt: skip
    values.update(changes)
    return export.CardRequest(**values)  # type: ignore[arg-type]


def test_the_same_inputs_give_the_same_ids_and_any_change_other_ones() -> None:
    inputs = {"image_id": "sha256:" + "a" * 64, "hostname": "pi-1", "board": "rpi3b"}
    first = layout.identities(layout.inputs_digest(inputs))
    assert first == layout.identities(layout.inputs_digest(dict(reversed(list(inputs.items())))))
    other = layout.identities(layout.inputs_digest({**inputs, "hostname": "pi-2"}))
    assert other.disk_id != first.disk_id and other.root_uuid != first.root_uuid
    assert len(first.disk_id) == 8 and int(first.disk_id, 16)
    assert first.root_partuuid == f"{first.disk_id}-02" and len(first.salt) == 16
    assert f"root=PARTUUID={first.disk_id}-02" in layout.cmdline(first, "ttyS1,115200")
    root, boot = layout.fstab(first).splitlines()
    assert root.split("\t")[:2] == [f"PARTUUID={first.disk_id}-02", "/"]
    assert boot.split("\t")[:3] == [f"PARTUUID={first.disk_id}-01", "/boot/firmware", "vfat"]


@pytest.mark.parametrize(
    ("text", "mib"), [("2G", 2048), ("1500M", 1500), ("3.5GiB", 3584), ("999", 996)]
)
def test_sizes_are_binary_and_aligned(text: str, mib: int) -> None:
    assert layout.parse_size(text) == mib


@pytest.mark.parametrize("text", ["2T", "lots", "100M"])
def test_a_size_that_is_not_one_or_too_small_is_a_user_error(text: str) -> None:
    with pytest.raises(UsageError):
        layout.parse_size(text)


@pytest.mark.parametrize(("changes", "words"), [
    ({"hostname": "Pi_1"}, "not a valid host name"),
    ({"user": "root"}, "not a user name a card can have"),
    ({"compress": "gzip"}, "--compress gzip is not known"),
    ({"extras": ("docker", "podman")}, "--with podman: not something a card can be made with"),
    ({"target": TARGETS["pynq-zu"]}, "cannot be made with the pynq-zu userland"),
    ({"target": TARGETS["rpi3"]}, "needs the vendor's boot partition"),
    ({"board": boards.load_boards()["pynq-z1"], "target": TARGETS["debian-armv7"]},
     "needs the vendor's boot partition"),
    ({"boot_from": Path("/x.img"), "board": boards.load_boards()["rpi3b"].__class__(
        **{**boards.load_boards()["rpi3b"].__dict__, "vendor_files": ()})}, "takes no --boot-from"),
])  # fmt: skip
def test_options_are_checked_before_anything_is_made(tmp_path: Path, changes: dict[str, object],
                                                      words: str) -> None:  # fmt: skip
    with pytest.raises(UsageError) as raised:
        request(tmp_path, **changes).check()
    assert words in raised.value.problem


@pytest.mark.parametrize("too_small", [False, True])
def test_a_card_that_fails_keeps_its_whole_log_beside_out_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, too_small: bool
) -> None:
    from dockerarch import engine
    from dockerarch.card.export import CardError

    lines = [f"#9 [system 3/7] RUN line {n}\n" for n in range(60)]
    if too_small:
        lines.append("#12 dockerarch-card: too-small 1400\n")

    def failing(spec: engine.BuildSpec) -> object:
        yield from lines
        raise engine.BuildFailed("docker buildx build exited with code 1", return_code=1)

    monkeypatch.setattr(export.engine, "build_lines", failing)
    work = tmp_path / "work"
    work.mkdir()
    keep = export.failed_log_path(request(tmp_path))
    assert keep == tmp_path / "pi.img.failed.log"
    with pytest.raises((CardError, UsageError)) as raised:
        export._build(work, work / "out", work / "build.log", None, lambda words: None, keep=keep)
    if too_small:  # the user's error, which says what to give: no log kept
        assert isinstance(raised.value, UsageError) and "--size 1464M" in raised.value.fix
        assert not keep.exists() and (work / "build.log").exists()
    else:
        assert isinstance(raised.value, CardError) and str(keep) in raised.value.fix
        assert keep.read_text() == "".join(lines) and not (work / "build.log").exists()
        assert lines[-1].strip() in raised.value.problem and lines[0] not in raised.value.problem


def test_an_existing_output_is_refused_without_force(tmp_path: Path) -> None:
    (tmp_path / "pi.img.bmap").write_text("old")
    with pytest.raises(UsageError) as raised:
        export.check_outputs(request(tmp_path))
    assert "pi.img.bmap exists" in raised.value.problem and "--force" in (raised.value.fix or "")
    export.check_outputs(request(tmp_path, force=True))
    assert [p.name for p in request(tmp_path, compress="xz").outputs] == [
        "pi.img.bmap",
        "pi.img.manifest.json",
        "pi.img.xz",
    ]  # the image last


def test_only_a_public_key_goes_on_a_card(tmp_path: Path) -> None:
    public = tmp_path / "id.pub"
    public.write_text("# mine\n" + KEY)
    assert export.read_keys(public) == KEY
    private = tmp_path / "id"
    private.write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    with pytest.raises(UsageError) as raised:
        export.read_keys(private)
    assert "is a private key" in raised.value.problem
    private.write_text("hello\n")
    with pytest.raises(UsageError):
        export.read_keys(private)


def test_a_password_hash_is_sha512_crypt_with_the_card_s_salt(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("correct horse\n")
    hashed = export.hash_password(secret, "abcdefgh01234567")
    assert hashed.startswith("$6$abcdefgh01234567$")
    assert hashed == export.hash_password(secret, "abcdefgh01234567")
    assert "correct horse" not in hashed


def test_a_project_s_boards_file_changes_and_adds_boards(tmp_path: Path) -> None:
    own = tmp_path / "boards.yaml"
    own.write_text("boards:\n  rpi3b:\n    user: alice\n  mine:\n    description: my board\n"
                   "    targets: [debian-aarch64]\n    boot: debian-raspi\n"
                   "    kernel: {aarch64: linux-image-arm64}\n    device_tree: x.dtb\n"
                   "    initramfs_modules: [ext4]\n    console: ttyAMA0,115200\n    user: me\n")  # fmt: skip
    own.write_text(own.read_text() + "    qemu:\n      aarch64: {system: qemu-system-aarch64, "
                   "machine: virt, console: ttyAMA0, append: maxcpus=2 quiet}\n")  # fmt: skip
    found = boards.load_boards(own)
    assert found["rpi3b"].user == "alice" and found["rpi3b"].device_tree == "bcm2837-rpi-3-b.dtb"
    assert found["mine"].kernel == {"aarch64": "linux-image-arm64"}
    assert found["mine"].qemu["aarch64"].append == "maxcpus=2 quiet"  # beside the card's cmdline
    own.write_text("boards:\n  rpi3b:\n    bootloader: x\n")
    with pytest.raises(ConfigError) as raised:
        boards.load_boards(own)
    assert "Unknown key 'boards.rpi3b.bootloader'" in raised.value.problem
    with pytest.raises(UsageError) as unknown:
        boards.find_board(boards.load_boards(), "rpi3")
    assert "Did you mean 'rpi3b'?" in unknown.value.problem


def test_a_vendor_booted_card_takes_its_boot_from_the_vendor_s_image(tmp_path: Path) -> None:
    pynq = boards.load_boards()["pynq-zu"]
    card = request(tmp_path, board=pynq, boot_from=tmp_path / "pynq.img.zip")
    card.check()
    assert card.kind == "vendor" and pynq.boot_mount == "/boot"
    raspi = request(tmp_path)
    assert raspi.kind == "debian-raspi"
    ids = layout.identities("ab" * 32)
    assert "\t/boot\tvfat" in layout.fstab(ids, pynq.boot_mount)


def test_the_card_s_dockerfile_has_the_stages_of_its_boot_kind(tmp_path: Path) -> None:
    from dockerarch.card.vendor import VendorBoot

    ids = layout.identities("cd" * 32)
    raspi = export.render(request(tmp_path), ids, 1700000000)
    assert "FROM system AS boot-sources" in raspi and "FROM boot AS card" in raspi
    assert "FROM boot-sources AS boot\n" in raspi
    assert "sh /run/dockerarch/boot --sources non-free-firmware\n" in raspi
    assert "sh /run/dockerarch/boot 'mmc_block" in raspi
    # the initramfs made as the userland was: its times clamped, the same bytes each time
    assert "SOURCE_DATE_EPOCH=1700000000 \\\n    sh /run/dockerarch/boot 'mmc_block" in raspi
    assert "linux-image-arm64 raspi-firmware" in raspi and "BOOT_IMAGE" not in raspi
    assert f"DISK_ID={ids.disk_id}" in raspi and "SOURCE_DATE_EPOCH=1700000000" in raspi
    # the run's own steps name it, so that export-img can take them out of BuildKit's cache
    run = export.RUN_MARKER + "f00d"
    named = export.render(request(tmp_path), ids, 1700000000, run=run)
    assert f"assemble /card /out/{run}" in named and f"COPY --from=assemble /out/{run}/ /" in named
    assert named.replace(run, export.RUN_MARKER + "0") == raspi
    # the system stage is the same text whatever the card: its cache serves every card of the image
    other = export.render(request(tmp_path, hostname="other"), layout.identities("ef" * 32), 1)
    assert (
        raspi.split("FROM system AS boot-sources")[0]
        == other.split("FROM system AS boot-sources")[0]
    )
    booted = VendorBoot(source=tmp_path / "v.zip", source_sha256="0" * 64, boot=tmp_path / "b",
                        boot_sha256="1" * 64, boot_type="c", kernel_release="6.1.5-xilinx",
                        tree=tmp_path / "t")  # fmt: skip
    pynq = request(tmp_path, board=boards.load_boards()["pynq-zu"], boot_from=tmp_path / "v.zip")
    vendor = export.render(pynq, ids, 1700000000, booted)
    assert "AS boot" not in vendor and "FROM system AS card" in vendor
    assert (
        "COPY vendor-tree/ /" in vendor
        and "BOOT_IMAGE=/run/dockerarch/card/vendor-boot.fat" in vendor
    )
    # a vendor's card shares the system stage with the Debian-booted cards of the same image
    system = raspi[raspi.index("FROM --platform") : raspi.index("# The board's kernel")]
    assert (
        system.strip()
        == vendor[vendor.index("FROM --platform") : vendor.index("# What the person")].strip()
    )


def test_the_card_s_apt_runs_natively_where_the_machine_has_the_suite_s_amd64_base(
    tmp_path: Path,
) -> None:
    """With the amd64 base of the userland's suite, each apt step of the card (system, kernel,
    --with) installs with that base's x86-64 apt from lists it fetched natively, in BuildKit's
    cache and not on the card; the kernel's lists are fetched for the sources with the firmware
    component added. Without the base, the target's own apt runs as before."""
    ids = layout.identities("cd" * 32)
    base = "dockerarch/base/debian-amd64:bookworm"
    native = export.render(request(tmp_path, extras=("docker",)), ids, 1, native_base=base)
    emulated = export.render(request(tmp_path, extras=("docker",)), ids, 1)
    assert f"FROM --platform=linux/amd64 {base} AS native-apt" in native
    assert "AS native-apt" not in emulated and "update-lists" not in emulated
    assert "apt-install" not in emulated
    steps = {stage: native.split(f" AS {stage}\n", 1)[1].split("\nFROM ", 1)[0]
             for stage in ("package-lists", "system", "boot-lists", "boot", "extras")}  # fmt: skip
    assert "from=userland,source=/etc/apt" in steps["package-lists"]
    assert "from=boot-sources,source=/etc/apt" in steps["boot-lists"]  # the component added
    lists = "id=dockerarch-apt-lists-debian-aarch64"
    assert f"{lists},target=/run/target-lists" in steps["package-lists"]
    assert f"{lists}-non-free-firmware,target=/run/target-lists" in steps["boot-lists"]
    for stage, fetched in (("system", "package-lists"), ("boot", "boot-lists"),
                           ("extras", "boot-lists")):  # fmt: skip
        assert "from=native-apt,target=/run/dockerarch-native" in steps[stage], stage
        assert f"from={fetched},source=/dockerarch-lists" in steps[stage], stage
        assert "target=/var/lib/apt/lists" in steps[stage], stage  # a cache: not on the card
    assert f"{lists},target=/var/lib/apt/lists" in steps["system"]
    assert f"{lists}-non-free-firmware,target=/var/lib/apt/lists" in steps["boot"]
    # a card without a firmware component (a vendor's boot) fetches the userland's lists once
    pynq = request(tmp_path, board=boards.load_boards()["pynq-zu"], boot_from=tmp_path / "v.zip")
    virt = export.render(pynq, ids, 1, native_base=base)
    assert "boot-lists" not in virt and "non-free-firmware" not in virt
    # the scripts take the native route only where the stage mounts it
    for script in ("system", "boot", "extras"):
        text = (Path(export.__file__).parent.parent / "data" / "card" / script).read_text()
        assert "[ -d /run/dockerarch-native ]" in text and "apt-install" in text, script
    assert set(export.APT_FILES) <= {
        p.name for p in (Path(export.__file__).parent.parent / "data" / "toolchain").iterdir()
    }


def test_a_card_with_docker_adds_one_stage_above_the_kernel(tmp_path: Path) -> None:
    """--with docker: Debian's engine from the target's archive, in a stage of its own on the
    kernel's: a card without it and one with it share every stage below (the emulated apt and
    mkinitramfs run once), the user joins the docker group its package makes, the manifest says."""
    ids = layout.identities("cd" * 32)
    plain = export.render(request(tmp_path), ids, 1700000000)
    docker = export.render(request(tmp_path, extras=("docker", "docker")), ids, 1700000000)
    assert "FROM boot AS extras" in docker and "FROM extras AS card" in docker
    assert (
        "sh /run/dockerarch/extras 'docker.io' 'maybe:docker-cli'\n" in docker
        and "docker.io" not in plain
    )
    below = plain.index("# What the person")
    assert docker[: plain.index("raspi-firmware")] == plain[: plain.index("raspi-firmware")]
    assert docker[docker.index("# What the person") :] == plain[below:].replace(
        "FROM boot AS card", "FROM extras AS card"
    )
    assert export.inputs(request(tmp_path, extras=("docker",)), "sha256:1")["with"] == ["docker"]
    assert export.inputs(request(tmp_path), "sha256:1")["with"] == []
    customise = (Path(export.__file__).parent.parent / "data" / "card" / "customise").read_text()
    assert "spi \\\n    docker; do" in customise  # the group, only where the package made it


def test_qemu_s_virt_machine_takes_a_virtio_card_and_only_the_network_named() -> None:
    """The generic virt machine: its own device tree (none given), the card on virtio, 2 CPUs
    of a named model; no network card unless asked, and then the board's packets reach nothing
    but the forwarded ports (restrict=on)."""
    from dockerarch.card import boot

    files = {"kernel": Path("/w/kernel"), "initrd": Path("/w/initrd"), "cmdline": "root=x",
             "disk": Path("/w/sd.qcow2")}  # fmt: skip
    virt = boot.qemu_argv(boot.VIRT["aarch64"], dtb=None, **files)  # type: ignore[arg-type]
    assert "-dtb" not in virt and virt[virt.index("-drive") + 1].startswith("if=virtio,")
    assert virt[virt.index("-cpu") + 1] == "cortex-a72" and virt[virt.index("-smp") + 1] == "2"
    assert virt[virt.index("-nic") + 1] == "none" and "-netdev" not in virt
    net = boot.Network(forward={2222: 22})
    wired = boot.qemu_argv(boot.VIRT["aarch64"], dtb=None, network=net, **files)  # type: ignore[arg-type]
    assert wired[wired.index("-netdev") + 1] == (
        "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:2222-:22"
    )
    out = boot.qemu_argv(boot.VIRT["aarch64"], dtb=None, network=boot.Network({2222: 22}, outside=True), **files)  # type: ignore[arg-type]  # fmt: skip
    assert out[out.index("-netdev") + 1] == "user,id=net0,hostfwd=tcp:127.0.0.1:2222-:22"
    assert "virtio-net-pci,netdev=net0,romfile=" in wired and "-nic" not in wired
    pi = boards.load_boards()["rpi3b"].qemu["aarch64"]
    raspi = boot.qemu_argv(pi, dtb=Path("/w/board.dtb"), **files)  # type: ignore[arg-type]
    assert raspi[raspi.index("-dtb") + 1] == "/w/board.dtb" and "-cpu" not in raspi
    assert raspi[raspi.index("-drive") + 1].startswith("if=sd,")
    assert raspi[-5:] == ["-serial", "null", "-serial", "stdio", "-no-reboot"]  # the mini UART
    assert pi.board_device_tree and not boot.VIRT["armv7"].board_device_tree
    # The Pi's four CPUs on fewer host cores run in one host thread (threads each lose whole
    # time slices to each other); on four cores, or two CPUs on two, one thread each.
    two = boot.qemu_argv(pi, dtb=Path("/w/board.dtb"), host_cpus=2, **files)  # type: ignore[arg-type]
    assert two[two.index("-accel") + 1] == "tcg,thread=single"
    assert "-accel" not in boot.qemu_argv(pi, dtb=None, host_cpus=4, **files)  # type: ignore[arg-type]
    assert "-accel" not in boot.qemu_argv(boot.VIRT["armv7"], dtb=None, host_cpus=2, **files)  # type: ignore[arg-type]


def test_a_command_s_output_on_the_console_is_what_it_printed() -> None:
    from dockerarch.card import boot

    echoed = "python3 -c 'import zstandard'; echo dockerarch-status=$?\r\n"
    printed = (
        "\x1b[?2004l0.23.0 armv7l\r\n"
        "[  123.456789] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [systemd-udevd:97]\r\n"
        "second line\r\n"
    )
    assert boot.command_output(echoed + printed) == "0.23.0 armv7l\nsecond line\n"
    # a line of the command's own that only holds brackets stays
    assert boot.command_output(echoed + "[1.5] not the kernel\n") == "[1.5] not the kernel\n"


class _Console:
    """Stands in for pexpect's child: shows the pattern at index ``shows`` of what is awaited."""

    def __init__(self, shows: str) -> None:
        self.shows = shows

    def expect(self, patterns: list[str], timeout: float) -> int:
        import re

        import pexpect

        shown = [i for i, p in enumerate(patterns) if re.search(p, self.shows)]
        if not shown:
            raise pexpect.TIMEOUT("nothing")
        return shown[0]


def test_a_board_that_stops_talking_is_the_emulator_s_fault_and_a_slow_one_is_not(
    tmp_path: Path,
) -> None:
    """A board silent for SILENT seconds while booting stalled under TCG (the boot is tried
    again); a board that talks but never shows the prompt runs into the timeout, a user's error
    about the card; a command may be quiet for as long as the timeout allows."""
    from dockerarch.card import boot

    log = boot.ConsoleLog(tmp_path / "console.log")
    quiet = _Console("")
    log.last -= boot.SILENT + 1
    with pytest.raises(
        boot.EmulatorFault, match=r"said nothing for 1\d\d s while the card was to show the login"
    ):
        boot.expect(quiet, log, "login: ", "the login prompt", 900, slice_s=0)  # fmt: skip
    with pytest.raises(boot.BootError, match="did not show the end of `make` in time") as raised:
        boot.expect(quiet, log, "status=", "the end of `make`", 0, silent=None, slice_s=0)
    assert not isinstance(raised.value, boot.EmulatorFault)
    log.write("[  12.000000] still booting\n")  # it talks: not silent, only slow
    with pytest.raises(boot.BootError, match="in time") as raised:
        boot.expect(quiet, log, "login: ", "the login prompt", 0, slice_s=0)
    assert not isinstance(raised.value, boot.EmulatorFault)
    log.close()
    assert (tmp_path / "console.log").read_text() == "[  12.000000] still booting\n"


def test_a_boot_the_emulated_sd_host_broke_is_tried_once_more_from_a_fresh_overlay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Pi's SD host driver times out when TCG leaves a vCPU unscheduled for longer than its
    10 s timer, and its DMA completion then oopses: the emulator's fault, watched for in every
    wait on the console, and the boot tried again; ATTEMPTS broken boots are an error."""
    from dockerarch.card import boot

    fault = (
        "[   95.320998] sdhost-bcm2835 3f202000.mmc: timeout waiting for hardware interrupt.\r\n"
    )
    log = boot.ConsoleLog(tmp_path / "console.log")
    with pytest.raises(boot.EmulatorFault, match="the login prompt"):
        boot.expect(_Console(fault), log, [r"login: ", boot.EMERGENCY], "the login prompt", 900)
    assert boot.expect(_Console("pi-1 login: "), log, [r"login: ", boot.EMERGENCY], "x", 900) == 0
    log.close()

    card = tmp_path / "pi.img"
    card.write_bytes(b"\0" * 1024)
    (tmp_path / "pi.img.manifest.json").write_text("{}")
    made: list[str] = []
    monkeypatch.setattr(boot, "boot_files", lambda *a: (card, card, card, "console=ttyS1"))
    monkeypatch.setattr(
        boot, "overlay", lambda c, w, size: made.append("overlay") or w / "sd.qcow2"
    )
    monkeypatch.setattr(boot.shutil, "which", lambda name: "/usr/bin/" + name)
    runs: list[int] = []

    def once(argv: list[str], **kw: object) -> boot.Booted:
        runs.append(1)
        (tmp_path / "console.log").write_text(fault)
        if len(runs) == 1:
            raise boot.EmulatorFault("the emulated SD host stalled")
        return boot.Booted(seconds_to_login=1.0)

    monkeypatch.setattr(boot, "_boot_once", once)
    rpi3b = boards.load_boards()["rpi3b"]
    said: list[str] = []
    booted = boot.boot(card, rpi3b, "armv7", user="pi", password="x", commands=[], work=tmp_path,
                       say=said.append)  # fmt: skip
    assert len(runs) == 2 and made == ["overlay", "overlay"]
    assert booted.emulator_faults == ["the emulated SD host stalled"]
    # the broken boot's console kept
    assert (tmp_path / "console-1.log").read_bytes() == fault.encode()
    assert any("booting the card again from a fresh overlay" in line for line in said), said

    broken: list[int] = []

    def always(argv: list[str], **kw: object) -> boot.Booted:
        broken.append(1)
        (tmp_path / "console.log").write_text(fault)
        raise boot.EmulatorFault("the emulated SD host stalled")

    monkeypatch.setattr(boot, "_boot_once", always)
    with pytest.raises(boot.EmulatorFault):
        boot.boot(card, rpi3b, "armv7", user="pi", password="x", commands=[], work=tmp_path,
                  say=said.append)  # fmt: skip
    assert len(broken) == boot.ATTEMPTS == 3  # each broken boot's console kept
    assert all((tmp_path / f"console-{n}.log").exists() for n in range(1, boot.ATTEMPTS))


def test_only_root_with_its_capabilities_can_bootstrap_the_card_tools_base() -> None:
    """export-img runs without privileges (the suite makes cards so): the card tools' base, when
    missing, is a clear error naming the one privileged command, not mmdebstrap's tar failing."""
    from dockerarch import base  # ensure_base's check, for export-img's tools base

    def status(uid: int, caps: str) -> str:
        return f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{caps}\n"

    assert base.can_bootstrap(status(0, "000001ffffffffff"))
    assert not base.can_bootstrap(status(0, "0000000000000000"))  # setpriv --bounding-set=-all
    assert not base.can_bootstrap(status(0, "0000000000000001"))  # chown alone
    assert not base.can_bootstrap(status(1000, "000001ffffffffff"))
    assert not base.can_bootstrap("")
