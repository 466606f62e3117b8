"""The layer reader: every kind of entry kept faithfully, and every escape refused.

The malicious layers are written here, byte by byte with tarfile; each is applied to an empty
root inside a sandbox directory, and afterwards nothing outside the root may have changed."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from dockerarch.layers import LayerWriter, UnsafeLayer

CAP_NET_RAW = bytes.fromhex("0100000200200000000000000000000000000000")


def layer(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, content in members:
            if content is not None:
                info.size = len(content)
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    data.seek(0)
    return data


def info(name: str, kind: bytes = tarfile.REGTYPE, **attrs: object) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.mode = 0o644 if kind == tarfile.REGTYPE else 0o755
    member.mtime = 1_700_000_000
    for key, value in attrs.items():
        setattr(member, key, value)
    return member


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes | str]]:
    found = {}
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(top) / name
            st = os.lstat(path)
            body: bytes | str = os.readlink(path) if path.is_symlink() else (
                path.read_bytes() if path.is_file() else b"")  # fmt: skip
            found[str(path.relative_to(folder))] = (st.st_mode, st.st_size, body)
    return found


@pytest.mark.root("device nodes, owners and file capabilities are written as the layer says")
def test_every_kind_of_entry_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    writer = LayerWriter(root)
    cap = info("usr/bin/ping", mode=0o755, uid=0, gid=0)
    cap.pax_headers = {
        "SCHILY.xattr.security.capability": CAP_NET_RAW.decode("utf-8", "surrogateescape")
    }
    writer.apply(layer(
        (info("usr", tarfile.DIRTYPE), None),
        (info("usr/bin", tarfile.DIRTYPE), None),
        (cap, b"\x7fELF ping"),
        (info("usr/bin/su", mode=0o4755), b"su"),
        (info("srv", tarfile.DIRTYPE, mode=0o2775, uid=4242, gid=4343), None),
        (info("tmp", tarfile.DIRTYPE, mode=0o1777), None),
        (info("srv/data", uid=4242, gid=4343), b"hello"),
        (info("srv/alias", tarfile.LNKTYPE, linkname="srv/data"), None),
        (info("srv/link", tarfile.SYMTYPE, linkname="data"), None),
        (info("srv/abs", tarfile.SYMTYPE, linkname="/usr/bin/su"), None),
        (info("dev", tarfile.DIRTYPE), None),
        (info("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3, mode=0o666), None),
        (info("srv/pipe", tarfile.FIFOTYPE, mode=0o600), None),
    ), "layer 1")  # fmt: skip
    writer.finish()
    st = os.lstat(root / "srv/data")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4242, 4343, 0o644)
    assert st.st_nlink == 2 and os.lstat(root / "srv/alias").st_ino == st.st_ino
    assert stat.S_IMODE(os.lstat(root / "usr/bin/su").st_mode) == 0o4755
    assert stat.S_IMODE(os.lstat(root / "srv").st_mode) == 0o2775
    assert stat.S_IMODE(os.lstat(root / "tmp").st_mode) == 0o1777
    assert (
        os.readlink(root / "srv/link") == "data" and os.readlink(root / "srv/abs") == "/usr/bin/su"
    )
    assert stat.S_ISCHR(os.lstat(root / "dev/null").st_mode)
    assert os.major(os.lstat(root / "dev/null").st_rdev) == 1
    assert stat.S_ISFIFO(os.lstat(root / "srv/pipe").st_mode)
    assert os.getxattr(root / "usr/bin/ping", "security.capability") == CAP_NET_RAW
    assert int(os.lstat(root / "srv").st_mtime) == 1_700_000_000  # after its children were written
    entries = writer.entries
    assert entries["/usr/bin/ping"].capability == CAP_NET_RAW.hex()
    assert (
        entries["/srv/alias"].link == "/srv/data"
        and entries["/srv/alias"].sha256 == entries["/srv/data"].sha256
    )
    assert entries["/dev/null"].dev == (1, 3)


def test_whiteouts_remove_what_lower_layers_wrote(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    writer = LayerWriter(root)
    writer.apply(layer((info("etc", tarfile.DIRTYPE), None), (info("etc/a"), b"a"),
                       (info("opt", tarfile.DIRTYPE), None), (info("opt/x"), b"x"),
                       (info("opt/y"), b"y")), "layer 1")  # fmt: skip
    writer.apply(layer((info("etc/.wh.a"), b""), (info("opt/.wh..wh..opq"), b""),
                       (info("opt/z"), b"z")), "layer 2")  # fmt: skip
    assert not (root / "etc/a").exists() and sorted(os.listdir(root / "opt")) == ["z"]
    assert "/etc/a" not in writer.entries and "/opt/x" not in writer.entries


def _outside_write(victim: Path) -> list[Callable[[], io.BytesIO]]:
    """Seven (and more) ways a crafted layer tries to write outside the root."""
    escape = os.path.relpath(victim, victim.parent.parent / "root")
    return [
        lambda: layer((info("../evil"), b"x")),  # climbs out with ..
        lambda: layer((info(str(victim)), b"x")),  # an absolute path
        lambda: layer((info("a/../../evil"), b"x")),  # .. in the middle
        lambda: layer((info("out", tarfile.SYMTYPE, linkname=str(victim.parent)), None),
                      (info("out/evil"), b"x")),  # writes through an absolute symlink
        lambda: layer((info("up", tarfile.SYMTYPE, linkname="../.."), None)),  # a link that climbs out
        lambda: layer((info("esc", tarfile.SYMTYPE, linkname=escape), None)),  # relative link to victim
        lambda: layer((info("hard", tarfile.LNKTYPE, linkname=str(victim)), None)),  # hardlink, absolute
        lambda: layer((info("hard", tarfile.LNKTYPE, linkname="../victim"), None)),  # hardlink, ..
        lambda: layer((info("d", tarfile.SYMTYPE, linkname="/"), None),
                      (info("d/etc/passwd"), b"x")),  # through a link to /
        lambda: layer((info("nothere", tarfile.LNKTYPE, linkname="missing"), None)),  # dangling hardlink
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(10))
def test_malicious_layers_write_nothing_outside(case: int, tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    root = sandbox / "root"
    root.mkdir(parents=True)
    victim = sandbox / "victim"
    victim.write_text("untouched")
    (sandbox / "other").mkdir()
    before = snapshot(sandbox)
    with pytest.raises(UnsafeLayer) as err:
        LayerWriter(root).apply(_outside_write(victim)[case](), "layer 1")
    assert "layer 1" in str(err.value)
    after = snapshot(sandbox)
    outside = {k: v for k, v in after.items() if not k.startswith("root")}
    assert outside == {k: v for k, v in before.items() if not k.startswith("root")}
    assert victim.read_text() == "untouched"
