"""Applying an image's layer tars to a directory, safely and faithfully.

The reader trusts nothing in a layer: a member named with ``..`` or an absolute path, a relative
symlink whose target climbs out of the root, a hardlink to anything outside it or not yet in it,
and any write through a symlink or into a non-directory are refused (the CVE-2007-4559 family,
umoci CVE-2021-29136). Files are opened with O_NOFOLLOW|O_EXCL, existing entries are unlinked,
never written through. Owners and groups by number, modes with setuid/setgid/sticky, hardlinks,
symlinks, device nodes, fifos, xattrs (``security.capability`` among them) and mtimes are kept;
OCI whiteouts (``.wh.NAME``, ``.wh..wh..opq``) remove what lower layers put there.

Every entry is recorded as it is written (``Entry``: the fidelity manifest's line), with the
sha256 of each regular file computed while it is copied.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import stat
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from dockerarch.errors import DockerarchError

CHUNK = 1 << 20
CAPABILITY = "security.capability"
_XATTR = "SCHILY.xattr."
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


class UnsafeLayer(DockerarchError):
    """A layer tries to write outside the root, or through a link."""

    exit_code = 10


@dataclass(kw_only=True)
class Entry:
    """One path of an exported tree, as the image defines it."""

    path: str  # "/etc/passwd"
    type: str  # file, dir, symlink, char, block, fifo
    uid: int
    gid: int
    mode: int  # permission bits with setuid/setgid/sticky
    size: int = 0
    sha256: str | None = None
    link: str | None = None  # a symlink's target, or the path a hardlink shares its inode with
    dev: tuple[int, int] | None = None
    capability: str | None = None  # the security.capability xattr, hex
    mtime: int = 0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mode"] = f"{self.mode:04o}"
        return {k: v for k, v in data.items() if v is not None}


def clean_name(name: str, *, layer: str, what: str = "member") -> str:
    """A member name as a path relative to the root ("" for the root), or UnsafeLayer."""
    if name.startswith("/"):
        raise UnsafeLayer(
            f"{layer}: the {what} '{name}' is an absolute path",
            fix="The image is malformed or malicious; nothing outside the destination was "
            "written. Export an image you trust.",
        )
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeLayer(
            f"{layer}: the {what} '{name}' climbs out of the root with '..'",
            fix="The image is malformed or malicious; nothing outside the destination was "
            "written. Export an image you trust.",
        )
    return "/".join(parts)


class LayerWriter:
    """Applies layers, one after the other, to ``root`` (an empty directory we own)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries: dict[str, Entry] = {}
        self._dir_times: dict[str, int] = {}
        self._root_fd_path = str(root)

    # --- paths ---------------------------------------------------------------------------
    def _parent(self, rel: str, layer: str) -> str:
        """The host path of ``rel``'s parent, every component a real directory inside the root
        (created 0755 root:root when a layer omits it, as Docker does)."""
        here = self._root_fd_path
        parents = rel.split("/")[:-1]
        for i, part in enumerate(parents):
            here = os.path.join(here, part)
            try:
                st = os.lstat(here)
            except FileNotFoundError:
                os.mkdir(here, 0o755)
                self.entries["/" + "/".join(parents[: i + 1])] = Entry(
                    path="/" + "/".join(parents[: i + 1]), type="dir", uid=0, gid=0, mode=0o755
                )
                continue
            if stat.S_ISLNK(st.st_mode):
                raise UnsafeLayer(
                    f"{layer}: '{rel}' would be written through the symlink "
                    f"'/{'/'.join(parents[: i + 1])}'",
                    fix="Layers write real paths; this one is malformed or malicious. Nothing "
                    "outside the destination was written.",
                )
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeLayer(
                    f"{layer}: '{rel}' has a parent that is not a directory "
                    f"('/{'/'.join(parents[: i + 1])}')",
                    fix="The image is malformed; export another.",
                )
        return here

    def _remove(self, host: str, rel: str) -> None:
        """Remove whatever is at ``host`` (never following a link) and forget it."""
        try:
            st = os.lstat(host)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(host)  # inside our own fresh tree: no mounts, links not followed
        else:
            os.unlink(host)
        prefix = "/" + rel
        for path in [p for p in self.entries if p == prefix or p.startswith(prefix + "/")]:
            del self.entries[path]
            self._dir_times.pop(path, None)

    # --- one layer -----------------------------------------------------------------------
    def apply(self, layer: IO[bytes], name: str) -> None:
        with tarfile.open(fileobj=layer, mode="r:*") as tar:
            for member in tar:
                self._member(tar, member, name)

    def _member(self, tar: tarfile.TarFile, member: tarfile.TarInfo, layer: str) -> None:
        rel = clean_name(member.name, layer=layer)
        if rel == "":
            self._metadata(self._root_fd_path, member, "/", is_link=False)
            return
        base = rel.rsplit("/", 1)[-1]
        parent = self._parent(rel, layer)
        if base == _OPAQUE:  # the directory's lower contents are hidden
            dir_rel = rel.rsplit("/", 1)[0] if "/" in rel else ""
            for child in os.listdir(parent):
                self._remove(os.path.join(parent, child), f"{dir_rel}/{child}".lstrip("/"))
            return
        if base.startswith(_WHITEOUT):
            gone = rel[: len(rel) - len(base)] + base[len(_WHITEOUT) :]
            self._remove(os.path.join(parent, base[len(_WHITEOUT) :]), gone)
            return
        host = os.path.join(parent, base)
        path = "/" + rel
        existing = _lstat(host)
        if existing is not None and not (member.isdir() and stat.S_ISDIR(existing.st_mode)):
            self._remove(host, rel)
        entry = Entry(path=path, type="file", uid=member.uid, gid=member.gid,
                      mode=member.mode & 0o7777, mtime=int(member.mtime))  # fmt: skip
        if member.isdir():
            entry.type = "dir"
            if existing is None or not stat.S_ISDIR(existing.st_mode):
                os.mkdir(host, 0o700)
            self._dir_times[path] = int(member.mtime)
        elif member.isreg():
            entry.size, entry.sha256 = self._write_file(tar, member, host)
        elif member.issym():
            target = member.linkname
            if not target.startswith("/"):
                climbed = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
                if climbed == ".." or climbed.startswith("../"):
                    raise UnsafeLayer(
                        f"{layer}: the symlink '{path}' -> '{target}' points outside the root",
                        fix="The image is malformed or malicious; nothing outside the "
                        "destination was written.",
                    )
            os.symlink(target, host)
            entry.type, entry.link = "symlink", target
        elif member.islnk():
            source_rel = clean_name(member.linkname, layer=layer, what="hardlink target")
            source = os.path.join(self._parent(source_rel, layer), source_rel.rsplit("/", 1)[-1])
            st = _lstat(source)
            known = self.entries.get("/" + source_rel)
            if st is None or known is None or not stat.S_ISREG(st.st_mode):
                raise UnsafeLayer(
                    f"{layer}: the hardlink '{path}' -> '{member.linkname}' does not name a "
                    "regular file already inside the root",
                    fix="The image is malformed or malicious; nothing outside the destination "
                    "was written.",
                )
            os.link(source, host, follow_symlinks=False)
            entry.size, entry.sha256 = known.size, known.sha256
            entry.link = "/" + source_rel
            entry.uid, entry.gid, entry.mode = known.uid, known.gid, known.mode
            entry.capability = known.capability
            self.entries[path] = entry
            return  # one inode: its metadata is the source's
        elif member.ischr() or member.isblk():
            kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK
            os.mknod(host, kind | 0o600, os.makedev(member.devmajor, member.devminor))
            entry.type = "char" if member.ischr() else "block"
            entry.dev = (member.devmajor, member.devminor)
        elif member.isfifo():
            os.mkfifo(host, 0o600)
            entry.type = "fifo"
        else:
            raise UnsafeLayer(f"{layer}: '{path}' is of a kind a layer cannot hold",
                              fix="Export another image.")  # fmt: skip
        entry.capability = self._metadata(host, member, path, is_link=member.issym())
        self.entries[path] = entry

    def _write_file(
        self, tar: tarfile.TarFile, member: tarfile.TarInfo, host: str
    ) -> tuple[int, str]:
        digest = hashlib.sha256()
        size = 0
        source = tar.extractfile(member)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(host, flags, 0o600)
        with os.fdopen(fd, "wb") as out:
            if source is not None:
                while chunk := source.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
        return size, digest.hexdigest()

    def _metadata(
        self, host: str, member: tarfile.TarInfo, path: str, *, is_link: bool
    ) -> str | None:
        """Owner, mode, xattrs and mtime (directories' mtimes last); the capability, if any."""
        os.lchown(host, member.uid, member.gid)
        capability = None
        for key, value in member.pax_headers.items():
            if key.startswith(_XATTR):
                name = key[len(_XATTR) :]
                data = value.encode("utf-8", "surrogateescape")
                os.setxattr(host, name, data, follow_symlinks=False)
                if name == CAPABILITY:
                    capability = data.hex()
        if not is_link:
            os.chmod(host, member.mode & 0o7777)  # after chown, which clears setuid/setgid
        if path != "/" and not member.isdir():
            os.utime(host, (member.mtime, member.mtime), follow_symlinks=False)
        elif path == "/":
            self._dir_times["/"] = int(member.mtime)
        return capability

    def finish(self) -> None:
        """Directories' mtimes, deepest first: writing their children changed them."""
        for path in sorted(self._dir_times, key=lambda p: p.count("/"), reverse=True):
            host = self._root_fd_path if path == "/" else os.path.join(self._root_fd_path, path[1:])
            if os.path.isdir(host) and not os.path.islink(host):
                os.utime(
                    host, (self._dir_times[path], self._dir_times[path]), follow_symlinks=False
                )


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
