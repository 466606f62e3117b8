"""`dockerarch export-rootfs`: an image becomes a root filesystem a board boots over NFS.

The tree comes from the image's own layers (``docker save``, then ``layers.LayerWriter``), not
from ``docker cp`` or BuildKit's exporters, which give every file to the caller (buildkit#1657)
or drop file capabilities (buildkit#2250). It is written to a temporary sibling of DEST, made
board-ready (Docker's leftovers out, fstab, hostname, network services that would pull the NFS
root from under the board neutralised), checked against its fidelity manifest, and only then
renamed into place. An existing DEST is replaced only when asked, never by deleting through a
mount point or a symlink.

Beside the tree, in ``DEST.boot/``: ``fidelity.jsonl`` (one line per path), ``exports`` (the
line for /etc/exports), ``cmdline.txt`` (a Raspberry Pi's), ``uboot.txt`` (PYNQ's bootargs),
``board-chroot`` (the board-side script, also at the tree's top) and ``export.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dockerarch import __version__, engine, oci, paths, process
from dockerarch.errors import DockerarchError, UsageError
from dockerarch.files import ensure_writable_dir, replace_dir, sha256_file, write_atomic
from dockerarch.layers import CAPABILITY, Entry, LayerWriter

Say = Callable[[str], None]
BOARD_SCRIPT = "board-chroot"
_HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class FidelityError(DockerarchError):
    """The exported tree differs from what the image's layers define."""

    exit_code = 11


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    client: str = "*"  # who may mount it: a CIDR, a host, or *
    server: str = "SERVER"  # the NFS server's address as boards reach it
    hostname: str = "board"
    force: bool = False
    caps_as_setuid: bool = False

    def check(self) -> None:
        from dockerarch.nfs import check_client

        check_client(self.client)
        if not re.fullmatch(r"[A-Za-z0-9.:-]+", self.server):
            raise UsageError(f"--server {self.server!r} is not a host name or address",
                             fix="Give the address boards reach this machine at, like --server 192.168.1.10.")  # fmt: skip
        if not _HOSTNAME.match(self.hostname):
            raise UsageError(f"--hostname {self.hostname!r} is not a valid host name",
                             fix="Use lowercase letters, digits and '-', like --hostname pynq-1.")  # fmt: skip


@dataclass(kw_only=True)
class Exported:
    dest: Path
    boot: Path
    image: str
    files: int
    capabilities: list[str] = field(default_factory=list)  # paths that carry one
    setuid_from_caps: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # board-ready edits, in words
    seconds: float = 0.0


# --- the destination --------------------------------------------------------------------------


def mount_points() -> list[str]:
    """Every mount point of this mount namespace (from /proc/self/mountinfo)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point))
    return points


def mounts_under(path: Path) -> list[str]:
    real = os.path.realpath(path)
    return [m for m in mount_points() if m == real or m.startswith(real.rstrip("/") + "/")]


def check_replaceable(dest: Path, force: bool) -> None:
    """DEST may be (re)written: absent, or an existing tree with --force that holds no mount and
    is not a symlink."""
    if not dest.parent.is_dir():
        raise UsageError(
            f"{dest.parent} does not exist", fix="Create it first, or choose another DEST."
        )
    ensure_writable_dir(dest.parent, "DEST's directory")  # the tree is made beside it first
    if os.path.lexists(dest):
        if dest.is_symlink():
            raise UsageError(
                f"{dest} is a symlink; dockerarch never replaces a tree through a link",
                fix="Give the real directory as DEST, or remove the link yourself.",
            )
        if not force:
            raise UsageError(
                f"{dest} exists", fix="Add --force to replace it, or choose another DEST."
            )
        live = mounts_under(dest)
        if live:
            raise UsageError(
                f"{dest} holds a live mount ({live[0]}): replacing it could delete through it",
                fix=f"Unmount it first (umount -R {live[0]}; stop any chroot or NFS server "
                "using it), then export again.",
            )


def remove_tree(path: Path) -> None:
    """Delete a tree we wrote, refusing to cross into another filesystem or a mount point."""
    live = mounts_under(path)
    if live:
        raise UsageError(f"{path} holds a live mount ({live[0]}); not deleting through it",
                         fix=f"Unmount {live[0]} first, then remove {path} yourself.")  # fmt: skip
    device = os.lstat(path).st_dev
    for top, dirs, _ in os.walk(path):
        for d in dirs:
            st = os.lstat(os.path.join(top, d))
            if st.st_dev != device:
                raise UsageError(f"{os.path.join(top, d)} is on another filesystem; not deleting "
                                 "through it", fix="Unmount it first.")  # fmt: skip
    shutil.rmtree(path)


# --- layers from the engine --------------------------------------------------------------------


def unpack_image(image: str, root: Path, work: Path, say: Say) -> dict[str, Entry]:
    """Every layer of ``image`` applied to the empty directory ``root``."""
    saved = work / "image.tar"
    say(f"reading the layers of {image}")
    engine.save_image(image, saved)
    writer = LayerWriter(root)
    with oci.open_saved(saved, image) as layout:
        for name, handle in layout.layers():
            writer.apply(handle, f"{image} {name}")
    writer.finish()
    saved.unlink()
    return writer.entries


# --- board-ready ------------------------------------------------------------------------------


def _touch(touched: list[str] | None, rel: str) -> None:
    """Record that ``rel`` and the folders above it may have changed (their entries are taken
    again from the tree before it is checked)."""
    if touched is not None:
        parts = rel.strip("/").split("/")
        touched += ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _write(root: Path, touched: list[str] | None, rel: str, text: str, mode: int = 0o644) -> None:
    """Replace a file of the tree (never through a link: an existing link is removed first)."""
    _touch(touched, rel)
    path = root / rel
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    os.chown(path, 0, 0)


def board_ready(
    root: Path, options: ExportOptions, nfs_path: str, touched: list[str] | None = None
) -> list[str]:
    """Make the tree boot as a board's NFS root; what was done, in words. Every path it writes
    or removes is added to ``touched``."""
    done = []
    for rel in (".dockerenv", "etc/resolv.conf", "dev/console"):
        _touch(touched, rel)
    if os.path.lexists(root / ".dockerenv"):
        (root / ".dockerenv").unlink()
        done.append("removed /.dockerenv (systemd took the board for a container: docker/cli#3037)")
    _write(root, touched, "etc/hostname", options.hostname + "\n")
    _write(root, touched, "etc/hosts", f"127.0.0.1\tlocalhost\n127.0.1.1\t{options.hostname}\n"
                              "::1\tlocalhost ip6-localhost ip6-loopback\n")  # fmt: skip
    done.append(f"hostname {options.hostname}, /etc/hosts with localhost")
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink():
        done.append(f"kept /etc/resolv.conf -> {os.readlink(resolv)}")
    else:  # Docker's (or none): the kernel's ip=dhcp answer names the DNS servers
        if os.path.lexists(resolv):
            resolv.unlink()
        os.symlink("../proc/net/pnp", resolv)
        done.append("/etc/resolv.conf -> /proc/net/pnp (the DNS servers the kernel's DHCP got)")
    console = root / "dev/console"
    if os.path.lexists(console) and not stat.S_ISCHR(os.lstat(console).st_mode):
        console.unlink()
    (root / "dev").mkdir(mode=0o755, exist_ok=True)
    if not os.path.lexists(console):
        os.mknod(console, stat.S_IFCHR | 0o600, os.makedev(5, 1))
        done.append("/dev/console is the character device 5,1")
    machine_id = root / "etc/machine-id"
    if os.path.lexists(machine_id):
        _write(root, touched, "etc/machine-id", "", 0o444)  # each board makes its own at first boot
        done.append("emptied /etc/machine-id (each board makes its own)")
    _write(root, touched, "etc/fstab", (
        "# Written by dockerarch export-rootfs: the root is mounted over NFS by the kernel\n"
        f"# (root=/dev/nfs nfsroot={options.server}:{nfs_path}); nothing here remounts it.\n"
        "proc      /proc     proc   defaults                 0 0\n"
        "tmpfs     /tmp      tmpfs  defaults,nosuid,nodev    0 0\n"
        "tmpfs     /var/tmp  tmpfs  defaults,nosuid,nodev    0 0\n"
        "tmpfs     /var/log  tmpfs  defaults,nosuid,nodev    0 0\n"
    ))  # fmt: skip
    done.append("/etc/fstab: proc and tmpfs on /tmp, /var/tmp, /var/log; the root is the kernel's")
    done += _quiet_network(root, touched)
    return done


def _quiet_network(root: Path, touched: list[str] | None) -> list[str]:
    """Keep every network manager the tree has off the interface its root came over."""
    done = []
    if (root / "lib/systemd/systemd-networkd").exists() or (
        root / "usr/lib/systemd/systemd-networkd"
    ).exists():
        _write(root, touched, "etc/systemd/network/10-dockerarch-nfsroot.network",
               "[Match]\nName=eth0 end0\n\n[Network]\nDHCP=yes\nKeepConfiguration=yes\n\n"
               "[DHCPv4]\nCriticalConnection=yes\n")  # fmt: skip
        done.append("systemd-networkd keeps eth0's address (KeepConfiguration: systemd#21967)")
    if (root / "etc/NetworkManager").is_dir():
        _write(root, touched, "etc/NetworkManager/conf.d/10-dockerarch-nfsroot.conf",
               "[keyfile]\nunmanaged-devices=interface-name:eth0;interface-name:end0\n")  # fmt: skip
        done.append("NetworkManager leaves eth0 alone (unmanaged)")
    dhcpcd = root / "etc/dhcpcd.conf"
    if dhcpcd.is_file() and not dhcpcd.is_symlink():
        text = dhcpcd.read_text()
        if "denyinterfaces eth0" not in text:
            _write(root, touched, "etc/dhcpcd.conf", text.rstrip("\n") + "\n\n# dockerarch: the NFS root "
                   "came over eth0\ndenyinterfaces eth0 end0\n")  # fmt: skip
        done.append("dhcpcd: denyinterfaces eth0")
    if (root / "etc/network/interfaces").exists() or (root / "etc/network/interfaces.d").is_dir():
        _write(root, touched, "etc/network/interfaces.d/dockerarch-nfsroot",
               "# dockerarch: the kernel configured eth0 to mount the root; leave it so\n"
               "iface eth0 inet manual\n")  # fmt: skip
        done.append("ifupdown: eth0 manual")
    return done


def boot_files(options: ExportOptions, nfs_path: str) -> dict[str, str]:
    """The exports line and each board's boot arguments, from the same settings."""
    nfsroot = f"{options.server}:{nfs_path}"
    return {
        "exports": f"{nfs_path} {options.client}(rw,sync,no_subtree_check,no_root_squash)\n",
        "cmdline.txt": f"console=serial0,115200 console=tty1 root=/dev/nfs nfsroot={nfsroot},vers=3 "
        "rw ip=dhcp rootwait\n",
        "uboot.txt": (
            "# PYNQ (U-Boot): at the U-Boot prompt, or in boot.scr / uEnv.txt\n"
            f"setenv bootargs 'console=ttyPS0,115200 root=/dev/nfs nfsroot={nfsroot},vers=3,tcp "
            "rw ip=dhcp rootwait earlycon'\n"
        ),
    }


# --- fidelity ---------------------------------------------------------------------------------


def _after_edits(root: Path, entries: dict[str, Entry], edited: list[str]) -> None:
    """Entries of the paths board_ready wrote, as they are now."""
    for path in edited:
        host = root / path.lstrip("/")
        if not os.path.lexists(host):
            entries.pop(path, None)
            continue
        entries[path] = describe(host, path)


def describe(host: Path, path: str) -> Entry:
    st = os.lstat(host)
    mode = st.st_mode
    entry = Entry(path=path, type="file", uid=st.st_uid, gid=st.st_gid, mode=stat.S_IMODE(mode),
                  mtime=int(st.st_mtime))  # fmt: skip
    if stat.S_ISDIR(mode):
        entry.type = "dir"
    elif stat.S_ISLNK(mode):
        entry.type, entry.link = "symlink", os.readlink(host)
        entry.mode = 0o777
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        entry.type = "char" if stat.S_ISCHR(mode) else "block"
        entry.dev = (os.major(st.st_rdev), os.minor(st.st_rdev))
    elif stat.S_ISFIFO(mode):
        entry.type = "fifo"
    else:
        entry.size, entry.sha256 = st.st_size, sha256_file(host)
    if not stat.S_ISLNK(mode):
        try:
            entry.capability = os.getxattr(host, CAPABILITY, follow_symlinks=False).hex()
        except OSError:
            pass
    return entry


def verify_tree(root: Path, entries: dict[str, Entry]) -> None:
    """Every path of the tree is what the manifest says, and nothing else is there."""
    seen: set[str] = set()
    inodes: dict[str, int] = {}
    problems: list[str] = []
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            host = Path(top) / name
            path = "/" + str(host.relative_to(root))
            seen.add(path)
            want = entries.get(path)
            if want is None:
                problems.append(f"{path} is not in the image")
                continue
            got = describe(host, path)
            inodes[path] = os.lstat(host).st_ino
            for key in ("type", "uid", "gid", "size", "sha256", "dev", "capability"):
                if getattr(got, key) != getattr(want, key):
                    problems.append(
                        f"{path}: {key} is {getattr(got, key)}, not {getattr(want, key)}"
                    )
            if want.type != "symlink" and got.mode != want.mode:
                problems.append(f"{path}: mode {got.mode:04o}, not {want.mode:04o}")
            if want.type == "symlink" and got.link != want.link:
                problems.append(f"{path}: link {got.link}, not {want.link}")
        if len(problems) > 20:
            break
    for path, want in entries.items():
        if want.type == "file" and want.link and inodes.get(path) != inodes.get(want.link):
            problems.append(f"{path} is no longer a hardlink of {want.link}")
    missing = sorted(set(entries) - seen - {"/"})
    problems += [f"{p} is missing" for p in missing[:10]]
    if problems:
        raise FidelityError(
            f"The exported tree differs from the image in {len(problems)} place(s): "
            + "; ".join(problems[:8]),
            fix="The destination's filesystem may not keep owners, device nodes or xattrs "
            "(export onto ext4, xfs or btrfs, as root).",
        )


def write_fidelity(entries: dict[str, Entry], path: Path) -> None:
    lines = [json.dumps(entries[p].as_dict(), sort_keys=True) for p in sorted(entries)]
    write_atomic(path, ("\n".join(lines) + "\n").encode())


def caps_to_setuid(root: Path, entries: dict[str, Entry]) -> list[str]:
    """pi-gen's fallback for NFS, which carries no file capabilities: setuid root instead."""
    changed = []
    for path, entry in sorted(entries.items()):
        if entry.capability and entry.type == "file":
            host = root / path.lstrip("/")
            os.removexattr(host, CAPABILITY, follow_symlinks=False)
            os.chown(host, 0, entry.gid)
            os.chmod(host, entry.mode | stat.S_ISUID)
            changed.append(path)
    return changed


# --- the command ------------------------------------------------------------------------------


def board_script() -> str:
    return paths.data_path("board-chroot").read_text()


def export(
    image: str, dest: Path, options: ExportOptions, *, say: Say, nfs_path: str | None = None
) -> Exported:
    """``image`` unpacked, board-ready and verified at ``dest`` (see the module's docstring).
    ``nfs_path``: where the server exports it, when not at ``dest`` itself."""
    options.check()
    started = time.monotonic()
    dest = Path(os.path.abspath(dest))
    check_replaceable(dest, options.force)
    boot = dest.with_name(dest.name + ".boot")
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        root, boot_tmp = work / "root", work / "boot"
        root.mkdir()
        boot_tmp.mkdir()
        entries = unpack_image(image, root, work, say)
        nfs_path = nfs_path or str(dest)
        touched: list[str] = []
        changes = board_ready(root, options, nfs_path, touched)
        script = board_script()
        _write(root, touched, BOARD_SCRIPT, script, 0o755)
        _after_edits(root, entries, sorted(set(touched)))
        caps = sorted(p for p, e in entries.items() if e.capability)
        setuid = caps_to_setuid(root, entries) if options.caps_as_setuid else []
        _after_edits(root, entries, setuid)
        say(f"checking {len(entries)} paths against the image")
        verify_tree(root, entries)
        write_fidelity(entries, boot_tmp / "fidelity.jsonl")
        for name, text in boot_files(options, nfs_path).items():
            (boot_tmp / name).write_text(text)
        (boot_tmp / BOARD_SCRIPT).write_text(script)
        os.chmod(boot_tmp / BOARD_SCRIPT, 0o755)
        result = Exported(dest=dest, boot=boot, image=image, files=len(entries), capabilities=caps,
                          setuid_from_caps=setuid, changes=changes)  # fmt: skip
        result.seconds = round(time.monotonic() - started, 1)
        (boot_tmp / "export.json").write_text(json.dumps({
            "image": image, "dest": str(dest), "paths": len(entries), "capabilities": caps,
            "setuid_from_caps": setuid, "changes": changes, "server": options.server,
            "client": options.client, "hostname": options.hostname, "seconds": result.seconds,
            "dockerarch": __version__, "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }, indent=2) + "\n")  # fmt: skip
        replace_dir(root, dest, remove=remove_tree)
        replace_dir(boot_tmp, boot, remove=remove_tree)
    finally:
        if work.exists():
            remove_tree(work)
    return result


def write_tarball(image: str, tarball: Path, options: ExportOptions, *, say: Say) -> Exported:
    """The same tree as one tar (owners by number, xattrs), written beside and renamed."""
    if os.path.lexists(tarball) and not options.force:
        raise UsageError(f"{tarball} exists", fix="Add --force to replace it.")
    work = Path(
        tempfile.mkdtemp(prefix=f".{tarball.name}.", suffix=".tmp", dir=tarball.parent or ".")
    )
    try:
        # Where it will be unpacked is the user's choice: the boot files name a usual place.
        nfs_path = f"/srv/nfs/{options.hostname}"
        say(f"the boot files assume the tree is unpacked and exported at {nfs_path}")
        result = export(image, work / "rootfs", options, say=say, nfs_path=nfs_path)
        part = work / "rootfs.tar"
        say(f"writing {tarball}")
        process.run(
            ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls", "-C",
             str(work / "rootfs"), "-cpf", str(part), "."],
        )  # fmt: skip
        shutil.copy2(
            work / "rootfs.boot" / "fidelity.jsonl",
            tarball.with_name(tarball.name + ".fidelity.jsonl"),
        )
        for name in ("exports", "cmdline.txt", "uboot.txt"):
            shutil.copy2(work / "rootfs.boot" / name, tarball.with_name(f"{tarball.name}.{name}"))
        os.replace(part, tarball)
        result.dest = tarball
        result.boot = tarball.parent
        return result
    finally:
        remove_tree(work)
