"""The whole path to a board: the demo's zstandard runtime image (plus a layer of every kind of
file) exported with export-rootfs, served by `dockerarch nfs serve` (nfs-ganesha), and mounted
over NFS by an emulated board (qemu-system, Debian's kernel) that enters it with the export's
board-side script and runs the checks there.

Server and board share a network namespace this test creates: the board's user-mode network
reaches the namespace's loopback as 10.0.2.2, and nothing leaves the machine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from dockerarch.nfs import kernel_server

from . import board
from .conftest import dockerarch, fidelity_image, in_netns

ARCHES = {"aarch64": ("debian-aarch64", "linux/arm64", "arm64", "aarch64"),
          "armv7": ("debian-armv7", "linux/arm/v7", "armhf", "armv7l")}  # fmt: skip

CHECK = r"""
python3 -B -c 'import platform, zstandard; print("imported zstandard", zstandard.__version__, platform.machine())'
stat -c 'stat %n %a %u %g %F' /fid/suid /fid/sgid /fid/sticky /fid/owned /fid/fifo
stat -c 'dev %n %t:%T %F' /fid/null
[ "$(stat -c %i /fid/hard-a)" = "$(stat -c %i /fid/hard-b)" ] && echo "hardlink shared $(stat -c %h /fid/hard-a)"
echo "rootfs $(awk '$2 == "/" { print $3 }' /proc/mounts | tail -n 1)"
"""


# Which server serves: the kernel's where the host has one, nfs-ganesha otherwise (this project's
# CI); the test ids say which one a run proved.
SERVER = "kernel" if kernel_server() else "ganesha"
CASES = [("aarch64", "4"), ("armv7", "4"), ("aarch64", "3")]


@pytest.mark.parametrize(("arch", "nfs"), CASES, ids=[f"{a}-nfs{n}-{SERVER}" for a, n in CASES])
def test_an_emulated_board_runs_the_export_over_nfs(
    arch: str,
    nfs: str,
    demo_dist: tuple[Path, subprocess.CompletedProcess[str]],
    netns: str,
    tmp_path: Path,
) -> None:
    target, platform, debian_arch, machine = ARCHES[arch]
    out, _ = demo_dist
    data = json.loads((out / target / "zstandard-0.23.0" / "manifest.json").read_text())
    context = tmp_path / "image"
    context.mkdir()
    image = fidelity_image(data["image"]["tag"], platform, f"dockerarch-test/board:{arch}", context)
    dest = tmp_path / "nfs" / f"board-{arch}-v{nfs}"
    dest.parent.mkdir()
    done = dockerarch("export-rootfs", "--image", image, "--target", target, str(dest),
                      "--server", "10.0.2.2", "--client", "10.0.2.0/24", timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]

    # QEMU's user-mode network reaches the server from the namespace's loopback: that is the
    # one client allowed.
    served = in_netns(netns, "nfs", "serve", str(dest), "--client", "127.0.0.1",
                      *(["--nfs3"] if nfs == "3" else []))  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert f" with {SERVER} " in served.stdout, served.stdout
    try:
        listed = in_netns(netns, "nfs", "ls")
        assert str(dest) in listed.stdout and "serving" in listed.stdout
        assert SERVER in listed.stdout.split(str(dest), 1)[1].splitlines()[0]
        kit = board.kit(debian_arch)
        initrd = board.initramfs(kit, tmp_path / "initrd.gz",
                                 board_script=(dest / "board-chroot").read_bytes(), check=CHECK)  # fmt: skip
        # NFSv3 (rpcbind, mountd) as U-Boot-era boards speak it; NFSv4.2 otherwise.
        opts = "vers=3,nolock,proto=tcp,mountproto=tcp" if nfs == "3" else ""
        code, console = board.boot(
            debian_arch, kit, initrd, nfspath=str(dest), netns=netns, nfs_opts=opts
        )
    finally:
        stopped = in_netns(netns, "nfs", "stop", str(dest))
    assert stopped.returncode == 0, stopped.stderr
    if nfs == "3":  # the rpcbind this export started ends with it
        assert subprocess.run(["pgrep", "-x", "rpcbind"], capture_output=True).returncode == 1
    (tmp_path / "console.log").write_text(console)
    assert code == 0, console[-4000:]
    lines = [line.strip() for line in console.splitlines()]
    assert f"imported zstandard 0.23.0 {machine}" in lines
    for expected in [
        "stat /fid/suid 4755 0 0 regular file",
        "stat /fid/sgid 2775 0 0 directory",
        "stat /fid/sticky 1777 0 0 directory",
        "stat /fid/owned 644 4242 4242 regular file",
        "stat /fid/fifo 644 0 0 fifo",
        "dev /fid/null 1:3 character special file",
        "hardlink shared 2",
        "rootfs nfs4" if nfs == "4" else "rootfs nfs",
    ]:
        assert expected in lines, (expected, console[-3000:])
    assert os.listdir(dest)  # the export is still there, untouched by the board's unmounts
