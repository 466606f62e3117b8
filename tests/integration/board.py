"""An emulated board for tests: qemu-system with Debian's own kernel and a small initramfs that
mounts an NFS export, enters it with the export's board-side script and runs a check.

Debian's kernels build virtio-net and NFS as modules and have no IP_PNP, so the initramfs
(static busybox, those modules in dependency order, an /init) is always needed. The kernel and
busybox come from the host's Debian mirror through a private apt configuration (its own lists,
cache and status; the host's dpkg is never touched), cached by version under the state
directory. Module dependencies are read from each module's .modinfo with pyelftools."""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dockerarch.hostapt import debian_mirror, read_sources

CACHE = Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch")) / "test-boards"
MODULES = ("virtio_pci", "virtio_net", "nfsv4", "nfsv3")


@dataclass(frozen=True)
class Board:
    arch: str  # Debian's
    kernel_package: str
    qemu: tuple[str, ...]
    console: str


BOARDS = {
    "arm64": Board("arm64", "linux-image-arm64",
                   ("qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a53"), "ttyAMA0"),
    "armhf": Board("armhf", "linux-image-armmp-lpae",
                   ("qemu-system-arm", "-M", "virt,highmem=off", "-cpu", "cortex-a15"), "ttyAMA0"),
}  # fmt: skip


@dataclass(frozen=True)
class Kit:
    kernel: Path
    busybox: Path
    modules: list[Path]  # in load order


def _apt(board: Board, root: Path) -> list[str]:
    return [
        "-o", f"Dir::State::Lists={root}/lists", "-o", f"Dir::State::status={root}/status",
        "-o", f"Dir::Cache={root}/cache", "-o", f"Dir::Etc::SourceList={root}/sources.list",
        "-o", "Dir::Etc::SourceParts=/nonexistent", "-o", f"APT::Architecture={board.arch}",
        "-o", f"APT::Architectures::={board.arch}", "-o", "APT::Sandbox::User=root", "-q",
    ]  # fmt: skip


def kit(arch: str) -> Kit:
    board = BOARDS[arch]
    root = CACHE / arch
    done = root / "kit"
    if not (done / "ready").exists():
        if root.exists():
            shutil.rmtree(root)
        for d in ("lists/partial", "cache/archives/partial", "debs", "kit"):
            (root / d).mkdir(parents=True)
        (root / "status").write_text("")
        mirror = debian_mirror(read_sources())
        (root / "sources.list").write_text(
            f"deb [signed-by={mirror.keyring}] {mirror.uri} {mirror.suite} main\n"
        )
        apt = _apt(board, root)
        subprocess.run(["apt-get", *apt, "update"], check=True, capture_output=True, timeout=600)
        depends = subprocess.run(["apt-cache", *apt, "depends", board.kernel_package],
                                 check=True, capture_output=True, text=True).stdout  # fmt: skip
        (image,) = re.findall(r"Depends: (linux-image-\S+)", depends)[:1]
        subprocess.run(["apt-get", *apt, "download", image, "busybox-static"], cwd=root / "debs",
                       check=True, capture_output=True, timeout=900)  # fmt: skip
        for deb in (root / "debs").glob("*.deb"):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(done)], check=True)
        shutil.rmtree(root / "debs")
        (done / "ready").write_text(image + "\n")
    (kernel,) = (done / "boot").glob("vmlinuz-*")
    version = kernel.name.removeprefix("vmlinuz-")
    return Kit(kernel=kernel, busybox=done / "bin" / "busybox",
               modules=_load_order(done / "lib" / "modules" / version, MODULES))  # fmt: skip


def _load_order(tree: Path, wanted: tuple[str, ...]) -> list[Path]:
    from elftools.elf.elffile import ELFFile

    by_name = {p.name.split(".ko")[0].replace("-", "_"): p for p in tree.rglob("*.ko*")}
    order: list[Path] = []

    def depends(path: Path) -> list[str]:
        with path.open("rb") as handle:
            section = ELFFile(handle).get_section_by_name(".modinfo")
            data = section.data() if section is not None else b""
        for field in data.split(b"\0"):
            if field.startswith(b"depends="):
                return [d for d in field[8:].decode().split(",") if d]
        return []

    def visit(name: str) -> None:
        path = by_name.get(name.replace("-", "_"))
        if path is None or path in order:
            return  # built into the kernel, or already there
        for dep in depends(path):
            visit(dep)
        order.append(path)

    for name in wanted:
        visit(name)
    return order


def _cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive: (name, mode, data) each; data of a symlink is its target."""
    out = io.BytesIO()
    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], 1):
        encoded = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
        out.write(b"070701" + b"".join(f"{f:08x}".encode() for f in fields) + encoded)
        out.write(b"\0" * (-out.tell() % 4))
        out.write(data)
        out.write(b"\0" * (-out.tell() % 4))
    return out.getvalue()


INIT = r"""#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /mnt
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s /bin
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod "/modules/$m" || echo "insmod $m failed"; done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
echo "DOCKERARCH-BOARD: up"
sh /board-chroot "10.0.2.2:$nfspath" /mnt -- /bin/sh -c "$(cat /check.sh)"
echo "DOCKERARCH-BOARD: exit $?"
poweroff -f
"""


def initramfs(k: Kit, out: Path, *, board_script: bytes, check: str) -> Path:
    entries: list[tuple[str, int, bytes]] = [
        ("bin", stat.S_IFDIR | 0o755, b""),
        ("modules", stat.S_IFDIR | 0o755, b""),
        ("bin/busybox", stat.S_IFREG | 0o755, k.busybox.read_bytes()),
        ("init", stat.S_IFREG | 0o755, INIT.encode()),
        ("board-chroot", stat.S_IFREG | 0o755, board_script),
        ("check.sh", stat.S_IFREG | 0o644, check.encode()),
        (
            "modules.order",
            stat.S_IFREG | 0o644,
            "\n".join(m.name for m in k.modules).encode() + b"\n",
        ),
    ]
    entries += [(f"modules/{m.name}", stat.S_IFREG | 0o644, m.read_bytes()) for m in k.modules]
    out.write_bytes(gzip.compress(_cpio(entries), compresslevel=1))
    return out


def boot(
    arch: str,
    k: Kit,
    initrd: Path,
    *,
    nfspath: str,
    netns: str,
    timeout: float = 240,
    nfs_opts: str = "",
) -> tuple[int | None, str]:
    """Boot the board in the network namespace ``netns``; (the check's exit code, console)."""
    board = BOARDS[arch]
    argv = [
        "nsenter", f"--net=/run/netns/{netns}", *board.qemu, "-m", "512", "-smp", "1",
        "-nographic", "-no-reboot", "-kernel", str(k.kernel), "-initrd", str(initrd),
        "-append", f"console={board.console} panic=-1 nfspath={nfspath}"
        + (f" BOARD_CHROOT_NFS_OPTS={nfs_opts}" if nfs_opts else ""),
        "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=",
    ]  # fmt: skip
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        console = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:  # the console so far says where it hangs
        said = [b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
                for b in (exc.stdout, exc.stderr)]  # fmt: skip
        console = "".join(said) + f"\n[qemu stopped: no power-off within {timeout:.0f} s]"
    console += f"\n[qemu ran {time.monotonic() - started:.1f} s]\n"
    found = re.search(r"DOCKERARCH-BOARD: exit (\d+)", console)
    return (int(found.group(1)) if found else None), console
