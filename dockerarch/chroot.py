"""`dockerarch chroot`: a shell or a command inside an ARM root filesystem, safely.

Everything is mounted inside a private mount namespace (and a PID namespace) that dies with the
command: fresh proc, read-only sysfs, a tmpfs /dev holding only the device nodes asked for, a
private devpts, the host's resolv.conf for the duration and ``--bind`` workspaces. Nothing is
mounted in the host's namespace, so nothing can be left behind by an error, Ctrl-C or SIGKILL
(arch-chroot's ``-N`` mode, with the kernel as the last line of cleanup): the host's
/proc/self/mountinfo is the same before and after, and ``rm -rf`` of the tree afterwards reaches
nothing else. ARM programs run through QEMU's binfmt entries with the F flag: nothing is copied
into the tree.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dockerarch import process
from dockerarch.errors import INTERRUPTED_EXIT, UsageError

DEFAULT_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_DEVICE = re.compile(r"^[a-z][a-z0-9_-]*(/[a-z0-9_-]+)?$")

# Run by `unshare` as PID 1's child in the new namespaces: $1 the root, $2 the devices, $3 the
# binds (SRC\tDST lines), then the command.
SETUP = r"""
set -e
root=$1 devices=$2 binds=$3
shift 3
[ -d "$root/proc" ] || mkdir -m 0555 "$root/proc"
[ -d "$root/sys" ] || mkdir -m 0555 "$root/sys"
[ -d "$root/dev" ] || mkdir -m 0755 "$root/dev"
mount -t proc -o nosuid,noexec,nodev proc "$root/proc"
mount -t sysfs -o ro,nosuid,noexec,nodev sys "$root/sys"
mount -t tmpfs -o nosuid,noexec,mode=0755,size=1m dev "$root/dev"
for d in $devices; do
  mkdir -p "$(dirname "$root/dev/$d")"
  : > "$root/dev/$d"
  mount --bind "/dev/$d" "$root/dev/$d"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs -o nosuid,nodev shm "$root/dev/shm"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
if [ -f /etc/resolv.conf ] && [ -f "$root/etc/resolv.conf" ] && [ ! -L "$root/etc/resolv.conf" ]; then
  mount --bind -o ro /etc/resolv.conf "$root/etc/resolv.conf"
fi
printf '%s' "$binds" | while IFS="$(printf '\t')" read -r src dst; do
  [ -n "$src" ] || continue
  mkdir -p "$root$dst"
  mount --bind "$src" "$root$dst"
done
exec chroot "$root" "$@"
"""


@dataclass(frozen=True, kw_only=True)
class Bind:
    source: Path
    target: str  # an absolute path inside the tree


def parse_bind(text: str) -> Bind:
    source, sep, target = text.partition(":")
    if not sep or not source or not target:
        raise UsageError(f"--bind {text!r} is not SRC:DST",
                         fix="Write it like --bind ./work:/workspace.")  # fmt: skip
    if not target.startswith("/") or ".." in target.split("/") or "\t" in text or "\n" in text:
        raise UsageError(f"--bind {text!r}: DST must be an absolute path inside the tree, without '..'",
                         fix="Write it like --bind ./work:/workspace.")  # fmt: skip
    path = Path(source).resolve()
    if not path.exists():
        raise UsageError(f"--bind {text!r}: {source} does not exist", fix="Create it first.")
    return Bind(source=path, target=target.rstrip("/") or "/")


def _check_target_inside(root: Path, target: str) -> None:
    """No component of a bind's target inside the tree may be a symlink (it could lead out)."""
    here = root
    for part in [p for p in target.split("/") if p]:
        here = here / part
        if here.is_symlink():
            raise UsageError(
                f"--bind target {target} goes through the symlink {here} inside the tree",
                fix="Bind onto a real directory of the tree.",
            )


def check_root(root: Path) -> Path:
    if not root.is_dir():
        raise UsageError(
            f"{root} is not a directory", fix="Give a tree export-rootfs wrote, or --image REF."
        )
    if not any((root / p).exists() or (root / p).is_symlink() for p in ("bin/sh", "usr/bin/sh")):
        raise UsageError(f"{root} has no /bin/sh: not a root filesystem",
                         fix="Give a tree export-rootfs wrote, or --image REF.")  # fmt: skip
    return root.resolve()


def _die_with_parent() -> None:  # runs in the child before exec: SIGKILL of us kills it too
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run(
    root: Path,
    command: Sequence[str],
    *,
    binds: Sequence[Bind] = (),
    devices: Sequence[str] = DEFAULT_DEVICES,
    on_start: Callable[[int], None] | None = None,
) -> int:
    """Run ``command`` (a login shell when empty) chrooted into ``root``; its exit code."""
    root = check_root(root)
    for name in devices:
        if not _DEVICE.match(name) or not os.path.exists(f"/dev/{name}"):
            raise UsageError(f"--device {name!r}: /dev/{name} does not exist on this machine",
                             fix="Name a device node under /dev, like --device vchiq.")  # fmt: skip
    for bind in binds:
        _check_target_inside(root, bind.target)
    shell = "/bin/bash" if (root / "bin/bash").exists() else "/bin/sh"
    argv = list(command) or [shell, "-l"]
    bind_lines = "".join(f"{b.source}\t{b.target}\n" for b in binds)
    args = [
        "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
        "--", "/bin/sh", "-c", SETUP, "dockerarch-chroot",
        str(root), " ".join(devices), bind_lines, *argv,
    ]  # fmt: skip
    # Mount points a bind needs are made for the run and removed after, so the tree is left as
    # it was (removing an empty directory never reaches through a mount: the namespace is gone).
    made = _make_mount_points(root, binds)
    try:
        with process.spawn(args, preexec_fn=_die_with_parent) as child:
            if on_start is not None:
                on_start(child.pid)
            try:
                return child.wait()
            except KeyboardInterrupt:
                child.kill()  # unshare ignores SIGTERM while it waits; --kill-child takes the rest
                child.wait()
                return INTERRUPTED_EXIT
    finally:
        for path, times in reversed(made):
            try:
                path.rmdir()
                os.utime(path.parent, ns=times)  # the parent's mtime as it was
            except OSError:
                pass  # something was written into it from outside the bind: keep it


def _make_mount_points(root: Path, binds: Sequence[Bind]) -> list[tuple[Path, tuple[int, int]]]:
    made = []
    for bind in binds:
        here = root
        for part in [p for p in bind.target.split("/") if p]:
            here = here / part
            if not here.exists():
                st = os.lstat(here.parent)
                here.mkdir(mode=0o755)
                made.append((here, (st.st_atime_ns, st.st_mtime_ns)))
    return made


def run_image(image: str, command: Sequence[str], *, binds: Sequence[Bind] = (),
              devices: Sequence[str] = DEFAULT_DEVICES, say: Callable[[str], None]) -> int:  # fmt: skip
    """The same in a throw-away tree unpacked from ``image`` (its changes are discarded)."""
    from dockerarch import rootfs

    work = Path(
        tempfile.mkdtemp(prefix=".dockerarch-chroot-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    )
    try:
        root = work / "root"
        root.mkdir()
        rootfs.unpack_image(image, root, work, say)
        say(f"{image} unpacked in {root}; changes made inside are discarded at exit")
        return run(root, command, binds=binds, devices=devices)
    finally:
        rootfs.remove_tree(work)
