"""`dockerarch export-img`: a verified userland becomes an SD card a board boots.

One buildx build (card.Dockerfile.j2): the userland's image gets the board's kernel, firmware and
a booting system from its own archive (``system``, shared by every card of that image), then
what the person flashing it asked for (``card``: host name, user, key, first-boot service); an
amd64 stage of Debian's tools writes the card into a plain file (``assemble``: sfdisk, mkfs.fat
and mtools, mke2fs -d; nothing mounted, no loop device, no privilege), every id derived from the
inputs and every time clamped, so that the same inputs give the same bytes. Its output lands in
a temporary directory beside OUT, is made sparse again, and is renamed into place last: OUT's
``.bmap`` and ``.manifest.json`` first, the image itself at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dockerarch import __version__, engine, paths, process
from dockerarch.card import layout, vendor
from dockerarch.card.boards import Board
from dockerarch.card.vendor import VendorBoot
from dockerarch.errors import DockerarchError, UsageError
from dockerarch.files import (
    abandoned_work_dirs,
    ensure_writable_dir,
    make_work_dir,
    sha256_file,
    write_atomic,
)
from dockerarch.targets import BoardTarget

Say = Callable[[str], None]
TOOLS_TARGET = "trixie-amd64"  # e2fsprogs 1.47.2: mke2fs -d clamps inode times
TOOLS_PACKAGES = ("e2fsprogs", "mtools", "dosfstools", "fdisk", "bmaptool", "xz-utils", "zstd",
                  "dpkg")  # fmt: skip
SYSTEM_PACKAGES = ("systemd-sysv", "udev", "dbus", "libpam-systemd", "kmod", "initramfs-tools",
                   "zstd", "e2fsprogs", "fdisk", "openssh-server", "sudo", "iproute2",
                   "systemd-resolved", "systemd-timesyncd")  # fmt: skip
COMPRESSORS = {"xz": ".xz", "zstd": ".zst"}
# What --with adds to a card, from the target's own archive. docker: Debian's engine, started at
# boot, the card's user in its group: the board is a builder node (dockerarch builder add).
EXTRAS = {"docker": ("docker.io", "maybe:docker-cli")}  # maybe: where the archive has it
CARD_FILES = (
    "system",
    "extras",
    "boot",
    "customise",
    "assemble",
    "firstboot",
    "dockerarch-firstboot.service",
)
# The hybrid build's apt scripts, for the card's own apt steps (native_apt_base), and what the
# progress says of the route apt-install's own words name.
APT_FILES = ("apt-install", "update-lists")
_APT_SAYS = {
    "apt-install: the x86-64 apt installs": "apt resolves and downloads natively (x86-64); dpkg "
    "and the maintainer scripts run emulated",
    "apt-install: updating the package lists under QEMU": "apt under QEMU: the native apt could "
    "not install from the lists it fetched",
}
_HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_KEY = re.compile(
    r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-[a-z0-9@.-]+) [A-Za-z0-9+/=]+( .*)?$"
)
_TOO_SMALL = re.compile(r"dockerarch-card: too-small (\d+)")
# Names one export-img's own build steps (assemble, out) in BuildKit's cache, which they leave
# once the image is out: each holds a whole image, and no later build can use them.
RUN_MARKER = "dockerarch-card-run-"


class CardError(DockerarchError):
    """The card could not be made."""

    exit_code = 12


@dataclass(frozen=True, kw_only=True)
class CardRequest:
    board: Board
    target: BoardTarget
    image: str  # a local image of the target's platform: the userland
    out: Path  # the image file to write (OUT.img; .xz/.zst added when compressed)
    hostname: str
    user: str
    ssh_keys: str  # authorized_keys lines
    password_file: Path | None = None  # its first line: the user's password (hashed here)
    size_mib: int = 0  # 0: the contents and a margin
    compress: str | None = None
    force: bool = False
    boot_from: Path | None = None  # the vendor's SD-card image (boot: vendor)
    extras: tuple[str, ...] = ()  # --with: EXTRAS' names

    @property
    def extra_packages(self) -> list[str]:
        return [p for name in sorted(set(self.extras)) for p in EXTRAS[name]]

    @property
    def kind(self) -> str:
        """How the boot partition is made (the board's boot kind, or vendor)."""
        return self.board.boot_kind(self.target, self.boot_from is not None)

    def check(self) -> None:
        """Every option, before the engine is asked anything."""
        if not _HOSTNAME.match(self.hostname):
            raise UsageError(f"--hostname {self.hostname!r} is not a valid host name",
                             fix="Use lowercase letters, digits and '-', like --hostname pi-1.")  # fmt: skip
        if not _USER.match(self.user) or self.user == "root":
            raise UsageError(f"--user {self.user!r} is not a user name a card can have",
                             fix="Use lowercase letters, digits, '_' and '-', like --user pi "
                             "(root logs in by no password and no key).")  # fmt: skip
        if self.compress is not None and self.compress not in COMPRESSORS:
            raise UsageError(f"--compress {self.compress} is not known",
                             fix=f"Give one of: {', '.join(COMPRESSORS)}.")  # fmt: skip
        if not self.out.name.endswith(".img"):
            raise UsageError(f"{self.out} does not end in .img",
                             fix="Name the card's image file like pi.img (with --compress, "
                             "pi.img.xz is written).")  # fmt: skip
        unknown = sorted(set(self.extras) - set(EXTRAS))
        if unknown:
            raise UsageError(f"--with {', '.join(unknown)}: not something a card can be made with",
                             fix=f"Give one of: {', '.join(EXTRAS)}.")  # fmt: skip
        self.board.check_target(self.target)
        _ = self.kind  # a user error when no boot source is known

    @property
    def written(self) -> Path:
        """The image file as written: OUT, or OUT.xz / OUT.zst."""
        suffix = COMPRESSORS[self.compress] if self.compress else ""
        return self.out.with_name(self.out.name + suffix)

    @property
    def outputs(self) -> list[Path]:
        """Every file this writes, the image last."""
        return [self.out.with_name(self.out.name + ".bmap"),
                self.out.with_name(self.out.name + ".manifest.json"), self.written]  # fmt: skip


@dataclass
class Card:
    path: Path
    bmap: Path
    manifest: Path
    size: int  # bytes of the image (before compression)
    content: int  # bytes of the files on it
    seconds: float
    data: dict[str, object] = field(default_factory=dict)


def read_keys(path: Path) -> str:
    """The public keys of an authorized_keys-style file (--ssh-key), checked: a private key or
    anything that is not a public key line is refused."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--ssh-key {path} cannot be read ({exc})",
                         fix="Give your public key, like --ssh-key ~/.ssh/id_ed25519.pub.") from exc  # fmt: skip
    if "PRIVATE KEY" in text:
        raise UsageError(f"--ssh-key {path} is a private key",
                         fix="Give the public one (the .pub beside it): the card must never hold "
                         "your private key.")  # fmt: skip
    lines = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    bad = [line for line in lines if not _KEY.match(line)]
    if not lines or bad:
        raise UsageError(f"--ssh-key {path} holds {'no key' if not lines else 'a line that is not a public key'}",
                         fix="Give an OpenSSH public key file (ssh-keygen -t ed25519 makes one).")  # fmt: skip
    return "\n".join(lines) + "\n"


def hash_password(path: Path, salt: str) -> str:
    """The SHA-512 crypt hash of the password in ``path`` (its first line; the file is never
    copied anywhere and the password never printed), with the card's own salt."""
    try:
        password = path.read_text().splitlines()[0]
    except (OSError, UnicodeDecodeError, IndexError) as exc:
        raise UsageError(f"--password-file {path} holds no password",
                         fix="Put the password on the file's first line.") from exc  # fmt: skip
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt  # the C library's crypt(3): what /etc/shadow's hashes are made with
        except ImportError:
            raise UsageError("--password-file needs Python's crypt module (Python 3.11 or 3.12)",
                             fix="Log in with --ssh-key alone, or run dockerarch with Python "
                             "3.11/3.12.") from None  # fmt: skip
        hashed = crypt.crypt(password, f"$6${salt}$")
    if not hashed or not hashed.startswith("$6$"):
        raise CardError("This machine's crypt(3) cannot make a SHA-512 password hash")
    return hashed


def check_outputs(request: CardRequest) -> None:
    parent = request.out.parent
    if not parent.is_dir():
        raise UsageError(f"{parent} does not exist", fix="Create it first, or choose another OUT.")
    ensure_writable_dir(parent, "OUT's directory")
    existing = [p for p in request.outputs if os.path.lexists(p)]
    if existing and not request.force:
        raise UsageError(f"{existing[0]} exists",
                         fix="Add --force to replace it, or choose another OUT.")  # fmt: skip
    for path in existing:
        if path.is_dir() and not path.is_symlink():
            raise UsageError(f"{path} is a directory", fix="Choose another OUT.")


def inputs(request: CardRequest, image_id: str) -> dict[str, object]:
    """What the card is made of, for its ids and its manifest (no secret: the password's hash
    is on the card, not here)."""
    import hashlib

    board = request.board
    return {
        "dockerarch": __version__,
        "image": request.image, "image_id": image_id,
        "board": board.name, "target": request.target.name,
        "boot": request.kind, "kernel": board.kernel.get(request.target.arch.name),
        "initramfs_modules": list(board.initramfs_modules), "console": board.console,
        "hostname": request.hostname, "user": request.user,
        "ssh_keys_sha256": hashlib.sha256(request.ssh_keys.encode()).hexdigest(),
        "password": request.password_file is not None,
        "size_mib": request.size_mib, "with": sorted(set(request.extras)),
    }  # fmt: skip


def source_date_epoch(labels: dict[str, str]) -> int:
    """The userland's SOURCE_DATE_EPOCH: its base's (dockerarch bases record it), else the
    environment's, else 0 would be wrong: ask for it."""
    for value in (labels.get("org.dockerarch.base.source-date-epoch"),
                  os.environ.get("SOURCE_DATE_EPOCH")):  # fmt: skip
        if value and value.isdigit():
            return int(value)
    raise UsageError("The image records no SOURCE_DATE_EPOCH (it was not made from a dockerarch "
                     "base), and none is set", fix="Set SOURCE_DATE_EPOCH=SECONDS: every "
                     "timestamp on the card is clamped to it.")  # fmt: skip


def native_apt_base(target: BoardTarget) -> str:
    """The amd64 base of ``target``'s suite (the one its hybrid builds take their toolchain
    from) when this machine has it: its x86-64 apt resolves and downloads for the card's apt
    steps, whose dpkg and maintainer scripts alone run emulated. "" when the machine lacks it
    or the target has none: the target's own apt runs under QEMU, as it did before."""
    from dockerarch.accel import toolchain_base
    from dockerarch.errors import ConfigError
    from dockerarch.targets import load_targets

    try:
        base = toolchain_base(target, load_targets())
    except ConfigError:
        return ""
    return base.base_image if engine.image_labels(base.base_image) is not None else ""


def render(request: CardRequest, ids: layout.Identities, epoch: int,
           vendor_boot: VendorBoot | None = None, run: str = RUN_MARKER + "0",
           native_base: str = "") -> str:  # fmt: skip
    from dockerarch import render as render_module
    from dockerarch.targets import load_targets

    tools = load_targets()[TOOLS_TARGET]
    env = render_module.template_environment(tuple(paths.template_dirs()))
    board = request.board
    raspi = request.kind == "debian-raspi"
    return env.get_template("card.Dockerfile.j2").render(
        board=board, target=request.target, image=request.image, ids=ids,
        component="non-free-firmware" if raspi else "-",
        system_packages=list(SYSTEM_PACKAGES), extras=sorted(set(request.extras)),
        extra_packages=request.extra_packages,
        boot_packages=[board.kernel[request.target.arch.name], "raspi-firmware"] if raspi else [],
        vendor_boot=vendor_boot is not None,
        vendor_boot_type=vendor_boot.boot_type if vendor_boot else "",
        vendor_kernel=(vendor_boot.kernel_release or "") if vendor_boot and vendor_boot.tree else "",
        tools_base=tools.base_image, tools_packages=list(TOOLS_PACKAGES),
        align_mib=layout.ALIGN_MIB, boot_mib=layout.BOOT_MIB, size_mib=request.size_mib,
        source_date_epoch=epoch, run=run, native_base=native_base,
    )  # fmt: skip


def write_context(directory: Path, request: CardRequest, ids: layout.Identities,
                  vendor_boot: VendorBoot | None = None) -> None:  # fmt: skip
    """The card stage's context: the scripts, card.env (the password's hash made with the
    card's own salt), the keys, and a vendor's boot partition and kernel tree."""
    for name in CARD_FILES:
        shutil.copy2(paths.data_path("card", name), directory / name)
    for name in APT_FILES:
        shutil.copy2(paths.data_path("toolchain", name), directory / name)
    if vendor_boot is not None:
        os.replace(vendor_boot.boot, directory / "vendor-boot.fat")
        if vendor_boot.tree is not None:
            os.replace(vendor_boot.tree, directory / "vendor-tree")
    console = request.board.console
    values = {
        "CARD_HOSTNAME": request.hostname, "CARD_USER": request.user, "CARD_CONSOLE": console,
        "CARD_CMDLINE": layout.cmdline(ids, console),
        "CARD_FSTAB_ROOT": layout.fstab(ids).splitlines()[0],
        "CARD_FSTAB_BOOT": layout.fstab(ids, request.board.boot_mount).splitlines()[1],
        "CARD_PASSWORD_HASH": hash_password(request.password_file, ids.salt)
        if request.password_file
        else "",
    }  # fmt: skip
    (directory / "card.env").write_text("".join(f"{k}={_quote(v)}\n" for k, v in values.items()))
    (directory / "authorized_keys").write_text(request.ssh_keys)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def export(request: CardRequest, say: Say) -> Card:
    """Make the card (see the module's words); raise a UsageError or CardError on failure, with
    nothing left under OUT's names."""
    from dockerarch.build import host_ca_bundle

    request.check()
    check_outputs(request)
    started = time.monotonic()
    found = engine.image_labels(request.image)
    if found is None:
        raise UsageError(f"There is no local image {request.image}",
                         fix="Build it first, or docker pull it.")  # fmt: skip
    image_id, labels = found
    platform = engine.image_platform(request.image)
    if platform.split("/")[:2] != request.target.platform.split("/")[:2]:
        raise UsageError(f"{request.image} is a {platform} image, not {request.target.platform} "
                         f"({request.target.name})", fix="Give an image of the target's platform.")  # fmt: skip
    epoch = source_date_epoch(labels)
    from dockerarch.base import ensure_base
    from dockerarch.targets import load_targets

    ensure_base(load_targets()[TOOLS_TARGET], say)  # the card tools' base
    # what cards whose command was killed left in BuildKit's cache (a running one's stay)
    engine.drop_cache_records(RUN_MARKER)
    made_of = inputs(request, image_id)
    for stale in abandoned_work_dirs(request.out.parent, request.out.name):
        shutil.rmtree(stale, ignore_errors=True)  # a card whose command was killed
    work = make_work_dir(request.out.parent, request.out.name)
    try:
        vendor_boot = None
        if request.kind == "vendor":
            assert request.boot_from is not None
            (work / "vendor").mkdir()
            vendor_boot = vendor.read(request.boot_from, request.board, request.target,
                                      work / "vendor", say)  # fmt: skip
            made_of["boot_from"] = {"file": request.boot_from.name,
                                    "sha256": vendor_boot.source_sha256,
                                    "boot_partition_sha256": vendor_boot.boot_sha256,
                                    "kernel": vendor_boot.kernel_release}  # fmt: skip
        digest = layout.inputs_digest(made_of)
        ids = layout.identities(digest)
        if vendor_boot is not None and vendor_boot.disk_id:
            # the vendor's boot files may name the root by PARTUUID (Raspberry Pi OS's
            # cmdline.txt does): the card keeps the vendor's disk id, so they find it
            ids = dataclasses.replace(ids, disk_id=vendor_boot.disk_id)
        context, output = work / "context", work / "out"
        context.mkdir()
        write_context(context, request, ids, vendor_boot)
        shutil.rmtree(work / "vendor", ignore_errors=True)  # a decompressed image
        run = RUN_MARKER + uuid.uuid4().hex
        native_base = native_apt_base(request.target)
        if not native_base:
            say(f"apt in the card's stages runs under QEMU: this machine has no amd64 base of "
                f"{request.target.name}'s suite (a hybrid build of it makes one)")  # fmt: skip
        (context / "Dockerfile").write_text(
            render(request, ids, epoch, vendor_boot, run, native_base)
        )
        log = work / "build.log"
        say(
            f"{request.board.name} card from {request.image} ({request.target.name}): "
            f"disk id {ids.disk_id}, root PARTUUID {ids.root_partuuid}"
        )
        failed_log = failed_log_path(request)
        try:
            _build(context, output, log, host_ca_bundle(), say, keep=failed_log)
        finally:
            engine.drop_cache_records(run)
        card = json.loads((output / "card.json").read_text())
        image = output / "card.img"
        process.run(["fallocate", "--dig-holes", str(image)], timeout=600)  # sparse again
        written = _compress(image, request.compress, say) if request.compress else image
        manifest = {
            "board": request.board.name, "target": request.target.name,
            "inputs": made_of, "inputs_sha256": digest,
            "disk_id": ids.disk_id, "root_partuuid": ids.root_partuuid,
            "boot_partuuid": ids.boot_partuuid, "source_date_epoch": epoch,
            "image": {"file": request.written.name, "sha256": sha256_file(image),
                      "size": image.stat().st_size,
                      **({"compressed_sha256": sha256_file(written)} if written != image else {})},
            **card,
        }  # fmt: skip
        bmap, manifest_path, final = request.outputs
        os.replace(output / "card.img.bmap", bmap)
        write_atomic(manifest_path, (json.dumps(manifest, indent=2) + "\n").encode())
        os.replace(written, final)
        if failed_log.is_file() and not failed_log.is_symlink():  # an earlier attempt's
            failed_log.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    content = sum(int(v) for v in card["content_kib"].values()) * 1024
    return Card(path=final, bmap=bmap, manifest=manifest_path, size=int(manifest["image"]["size"]),
                content=content, seconds=time.monotonic() - started, data=manifest)  # fmt: skip


def failed_log_path(request: CardRequest) -> Path:
    """Where a card that failed keeps its build's whole log: beside OUT, under none of OUT's
    names (a good card there stays as it was)."""
    return request.out.with_name(request.out.name + ".failed.log")


def _build(context: Path, output: Path, log: Path, ca: str | None, say: Say, *,
           keep: Path) -> None:  # fmt: skip
    """The card's buildx invocation, its lines to ``log`` and its stages said; a failure keeps
    ``log`` as ``keep`` and names it (a --size too small for the contents is the user's, and
    says the size it needs)."""
    spec = engine.BuildSpec(context_dir=context, platform="linux/amd64", stage="out",
                            output_dir=output,
                            secrets=(f"id=ca-bundle,src={ca}",) if ca else ())  # fmt: skip
    stage_re = re.compile(r"^#\d+ \[(system|boot|extras|card|tools|assemble)[ \]]")
    said: set[str] = set()
    text = []
    try:
        with log.open("w") as written:
            for line in engine.build_lines(spec):
                written.write(line if line.endswith("\n") else line + "\n")
                text.append(line)
                for marker, words in _APT_SAYS.items():
                    if marker in line and marker not in said:
                        said.add(marker)
                        say(words)
                match = stage_re.match(line)
                if match and match.group(1) not in said:
                    said.add(match.group(1))
                    say(
                        {
                            "system": "a system that boots: systemd, udev, ssh",
                            "boot": "the board's kernel and firmware",
                            "extras": "what --with asked for",
                            "card": "host name, user, key and first-boot service",
                            "tools": "Debian's card tools (amd64)",
                            "assemble": "partitions written into the image file",
                        }[match.group(1)]
                    )
    except engine.BuildFailed as exc:
        joined = "".join(text[-400:])
        small = _TOO_SMALL.search(joined)
        if small:
            raise UsageError(f"The card's contents need {small.group(1)} MiB, more than --size gives",
                             fix=f"Give --size {int(small.group(1)) + 64}M or more, or leave "
                             "--size out (the contents and a margin).") from None  # fmt: skip
        tail = "".join(text[-25:])
        os.replace(log, keep)
        raise CardError(f"Making the card failed ({exc.problem}); the build's last lines:\n{tail}",
                        fix=f"Read the lines above; the whole log is {keep}.") from exc  # fmt: skip


def _compress(image: Path, how: str, say: Say) -> Path:
    """``image`` compressed beside itself, the same bytes for the same image: zstd's output
    does not depend on its thread count; xz is single-threaded here for the same reason."""
    target = image.with_name(image.name + COMPRESSORS[how])
    say(f"compressing with {how}")
    argv = (["zstd", "-q", "-T0", "-10", "--long=27", "-o", str(target), str(image)] if how == "zstd"
            else ["xz", "-q", "-k", "-T1", "-6", str(image)])  # fmt: skip
    process.run(argv, timeout=3600)
    return target
