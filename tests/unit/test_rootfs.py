"""export-rootfs's pieces that need no engine: board-ready edits, boot files, destinations,
fidelity checks, chroot's arguments and the NFS server's configuration."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dockerarch import chroot, nfs, rootfs
from dockerarch.errors import UsageError
from dockerarch.layers import Entry


def test_boot_files_come_from_the_same_settings() -> None:
    options = rootfs.ExportOptions(client="192.168.1.0/24", server="192.168.1.10", hostname="pi-1")
    files = rootfs.boot_files(options, "/srv/nfs/pi-1")
    assert (
        files["exports"]
        == "/srv/nfs/pi-1 192.168.1.0/24(rw,sync,no_subtree_check,no_root_squash)\n"
    )
    assert (
        "root=/dev/nfs nfsroot=192.168.1.10:/srv/nfs/pi-1,vers=3 rw ip=dhcp rootwait"
        in files["cmdline.txt"]
    )
    assert "init=" not in files["cmdline.txt"]
    assert "nfsroot=192.168.1.10:/srv/nfs/pi-1,vers=3,tcp" in files["uboot.txt"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"client": "not a net!"}, "--client"),
        ({"server": "a b"}, "--server"),
        ({"hostname": "Bad_Name"}, "--hostname"),
    ],
)
def test_bad_export_options(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        rootfs.ExportOptions(**kwargs).check()


@pytest.mark.root("/dev/console is made as a character device")
def test_board_ready_edits(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for d in ("etc/NetworkManager", "etc/network", "dev", "usr/lib/systemd"):
        (root / d).mkdir(parents=True)
    (root / ".dockerenv").write_text("")
    (root / "etc/resolv.conf").write_text("nameserver 127.0.0.11\n")
    (root / "etc/machine-id").write_text("0123456789abcdef\n")
    (root / "etc/dhcpcd.conf").write_text("hostname\n")
    (root / "etc/network/interfaces").write_text("auto lo\n")
    (root / "usr/lib/systemd/systemd-networkd").write_text("")
    (root / "dev/console").write_text("")  # what docker export leaves: a regular file
    said = rootfs.board_ready(
        root, rootfs.ExportOptions(hostname="pynq-1", server="10.0.0.1"), "/srv/x"
    )
    assert not os.path.lexists(root / ".dockerenv")
    assert (root / "etc/hostname").read_text() == "pynq-1\n"
    assert os.readlink(root / "etc/resolv.conf") == "../proc/net/pnp"
    assert stat.S_ISCHR(os.lstat(root / "dev/console").st_mode)
    assert (root / "etc/machine-id").read_text() == ""
    assert "denyinterfaces eth0" in (root / "etc/dhcpcd.conf").read_text()
    assert (
        "KeepConfiguration=yes"
        in (root / "etc/systemd/network/10-dockerarch-nfsroot.network").read_text()
    )
    assert "unmanaged-devices=interface-name:eth0" in (
        root / "etc/NetworkManager/conf.d/10-dockerarch-nfsroot.conf").read_text()  # fmt: skip
    assert (
        "iface eth0 inet manual"
        in (root / "etc/network/interfaces.d/dockerarch-nfsroot").read_text()
    )
    assert "nfsroot=10.0.0.1:/srv/x" in (root / "etc/fstab").read_text()
    assert len(said) >= 8


def test_destination_rules(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    with pytest.raises(UsageError, match="--force"):
        rootfs.check_replaceable(tree, force=False)
    rootfs.check_replaceable(tree, force=True)
    link = tmp_path / "link"
    link.symlink_to(tree)
    with pytest.raises(UsageError, match="is a symlink"):
        rootfs.check_replaceable(link, force=True)
    with pytest.raises(UsageError, match="does not exist"):
        rootfs.check_replaceable(tmp_path / "no" / "dest", force=False)
    # A tree that holds a mount point (here: /proc itself) is never replaced or deleted.
    with pytest.raises(UsageError, match="live mount"):
        rootfs.check_replaceable(Path("/proc"), force=True)
    with pytest.raises(UsageError, match="live mount"):
        rootfs.remove_tree(Path("/proc"))


def test_verify_tree_finds_differences(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a").write_text("one")
    entries = {"/a": rootfs.describe(root / "a", "/a")}
    rootfs.verify_tree(root, entries)
    os.chmod(root / "a", 0o600)
    (root / "extra").write_text("")
    with pytest.raises(rootfs.FidelityError) as err:
        rootfs.verify_tree(root, entries)
    assert "/a: mode 0600" in str(err.value) and "/extra is not in the image" in str(err.value)


@pytest.mark.root("security.capability is set on a file")
def test_caps_as_setuid(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "ping").write_text("x")
    cap = bytes.fromhex("0100000200200000000000000000000000000000")
    os.setxattr(root / "ping", "security.capability", cap)
    entries = {
        "/ping": Entry(path="/ping", type="file", uid=0, gid=0, mode=0o755, capability=cap.hex())
    }
    assert rootfs.caps_to_setuid(root, entries) == ["/ping"]
    assert stat.S_IMODE(os.lstat(root / "ping").st_mode) == 0o4755
    with pytest.raises(OSError):
        os.getxattr(root / "ping", "security.capability")


@pytest.mark.parametrize(
    ("text", "message"),
    [("nocolon", "not SRC:DST"), ("/tmp:relative", "absolute path"), ("/tmp:/a/../b", "absolute path"),
     ("/does/not/exist:/w", "does not exist")],
)  # fmt: skip
def test_bad_binds(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        chroot.parse_bind(text)


def test_bind_target_may_not_go_through_a_link(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "bin/sh").write_text("")
    (root / "out").symlink_to("/")
    with pytest.raises(UsageError, match="symlink"):
        chroot._check_target_inside(root, "/out/etc")
    with pytest.raises(UsageError, match="no /bin/sh"):
        chroot.check_root(tmp_path)


def test_ganesha_configuration() -> None:
    exports = [nfs.Export(path="/srv/nfs/a", client="10.0.2.0/24", server="ganesha", netns=1,
                          nfs3=False, since="now")]  # fmt: skip
    conf = nfs.ganesha_config(exports, Path("/state/recovery"))
    assert 'Path = "/srv/nfs/a";' in conf and 'Pseudo = "/srv/nfs/a";' in conf
    assert "Squash = No_Root_Squash;" in conf and "Clients = 10.0.2.0/24;" in conf
    assert "Graceless = true;" in conf and "Protocols = 4;" in conf
    both = nfs.ganesha_config([*exports[:1], nfs.Export(path="/b", client="*", server="ganesha",
                                                        netns=1, nfs3=True, since="now")], Path("/r"))  # fmt: skip
    assert "Protocols = 3, 4;" in both and "Export_Id = 2;" in both
