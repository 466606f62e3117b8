"""export-rootfs from real image layers, and chroot in a private mount namespace.

The fidelity image is the C extension's aarch64 runtime image plus one layer that holds every
kind of entry a board's root has: setuid, setgid and sticky, uid 4242, a hardlink pair, a device
node, a fifo and a file capability."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO, dockerarch, fidelity_image

FIDELITY = "dockerarch-test/fidelity:aarch64"


@pytest.fixture(scope="module")
def fidelity(cext_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    data = json.loads(
        (cext_dist / "debian-aarch64" / "dockerarch_tinyext-1.0.0" / "manifest.json").read_text()
    )
    return fidelity_image(
        data["image"]["tag"], "linux/arm64", FIDELITY, tmp_path_factory.mktemp("fidelity")
    )


@pytest.fixture(scope="module")
def exported(
    fidelity: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    dest = tmp_path_factory.mktemp("export") / "pynq"
    done = dockerarch("export-rootfs", "--image", fidelity, "--target", "debian-aarch64",
                      str(dest), "--server", "10.0.2.2", "--client", "10.0.2.0/24",
                      "--hostname", "pynq-1", timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dest, done


def test_export_keeps_every_kind_of_entry(
    exported: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    dest, done = exported
    assert done.stdout.strip() == str(dest)
    fid = dest / "fid"
    assert stat.S_IMODE(os.lstat(fid / "suid").st_mode) == 0o4755
    assert stat.S_IMODE(os.lstat(fid / "sgid").st_mode) == 0o2775
    assert stat.S_IMODE(os.lstat(fid / "sticky").st_mode) == 0o1777
    assert (os.lstat(fid / "owned").st_uid, os.lstat(fid / "owned").st_gid) == (4242, 4242)
    assert os.lstat(fid / "hard-a").st_ino == os.lstat(fid / "hard-b").st_ino
    assert stat.S_ISCHR(os.lstat(fid / "null").st_mode) and os.lstat(
        fid / "null"
    ).st_rdev == os.makedev(1, 3)
    assert stat.S_ISFIFO(os.lstat(fid / "fifo").st_mode)
    assert os.getxattr(fid / "pinger", "security.capability").hex().startswith("01000002")
    # The fidelity manifest beside the tree describes it, and names the capability's loss.
    lines = [
        json.loads(x)
        for x in (dest.parent / "pynq.boot" / "fidelity.jsonl").read_text().splitlines()
    ]
    by_path = {e["path"]: e for e in lines}
    assert by_path["/fid/owned"]["uid"] == 4242 and by_path["/fid/hard-b"]["link"] == "/fid/hard-a"
    assert by_path["/fid/pinger"]["capability"].startswith("01000002")
    assert by_path["/fid/null"]["dev"] == [1, 3] and by_path["/fid/suid"]["mode"] == "4755"
    said = " ".join(done.stderr.split())
    assert "NFS carries no file capabilities" in said and "/fid/pinger" in said


def test_export_is_board_ready(exported: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    dest, done = exported
    boot = dest.parent / "pynq.boot"
    assert not os.path.lexists(dest / ".dockerenv")
    assert (dest / "etc/hostname").read_text() == "pynq-1\n"
    assert "127.0.0.1\tlocalhost" in (dest / "etc/hosts").read_text()
    assert stat.S_ISCHR(os.lstat(dest / "dev/console").st_mode)
    assert "proc      /proc" in (dest / "etc/fstab").read_text()
    assert (
        boot / "exports"
    ).read_text() == f"{dest} 10.0.2.0/24(rw,sync,no_subtree_check,no_root_squash)\n"
    cmdline = (boot / "cmdline.txt").read_text()
    assert f"root=/dev/nfs nfsroot=10.0.2.2:{dest},vers=3 rw ip=dhcp rootwait" in cmdline
    assert "init=" not in cmdline
    assert f"nfsroot=10.0.2.2:{dest}" in (boot / "uboot.txt").read_text()
    assert (dest / "board-chroot").read_bytes() == (boot / "board-chroot").read_bytes()
    assert f"{dest} 10.0.2.0/24(rw,sync" in done.stderr
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(".")], "a temporary was left"


def test_board_script_is_shellcheck_clean(
    exported: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    dest, _ = exported
    done = subprocess.run(
        ["shellcheck", "--shell=sh", str(dest / "board-chroot")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout


def test_an_existing_dest_needs_force_and_never_a_symlink(
    fidelity: str, exported: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    dest, _ = exported
    again = dockerarch(
        "export-rootfs", "--image", fidelity, "--target", "debian-aarch64", str(dest)
    )
    assert again.returncode == 2 and "--force" in again.stderr
    link = tmp_path / "link"
    link.symlink_to(dest)
    through = dockerarch("export-rootfs", "--image", fidelity, "--target", "debian-aarch64",
                         str(link), "--force")  # fmt: skip
    assert through.returncode == 2 and "is a symlink" in through.stderr
    wrong = dockerarch(
        "export-rootfs", "--image", fidelity, "--target", "debian-armv7", str(tmp_path / "x")
    )
    assert wrong.returncode == 2 and "linux/arm64 image, not linux/arm/v7" in " ".join(
        wrong.stderr.split()
    )


def test_caps_as_setuid_and_tarball(fidelity: str, tmp_path: Path) -> None:
    tarball = tmp_path / "rootfs.tar"
    done = dockerarch("export-rootfs", "--image", fidelity, "--target", "debian-aarch64",
                      "--tarball", str(tarball), "--caps-as-setuid", timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    listing = subprocess.run(["tar", "--numeric-owner", "-tvf", str(tarball), "./fid/owned", "./fid/pinger"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "4242/4242" in listing and "-rwsr-xr-x 0/0" in listing
    assert (tmp_path / "rootfs.tar.fidelity.jsonl").is_file()


# --- chroot -------------------------------------------------------------------------------------


# Mounts a test here does not make, and the other worker's tests (make test) make meanwhile: the
# engine's (containers, BuildKit's snapshots), network namespaces' files, the stand-in node's.
OTHERS = ("/var/lib/docker/", "/run/docker/", "/var/run/docker/", "/run/netns",
          "/var/lib/dockerarch/test-node/")  # fmt: skip


def mountinfo() -> list[str]:
    """This mount namespace's mounts (their lines), but OTHERS'."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return sorted(line for line in lines if not line.split()[4].startswith(OTHERS))


def tree_state(root: Path) -> dict[str, tuple[int, int, int, int]]:
    state = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(Path(top) / name)
            state[os.path.join(top, name)] = (st.st_mode, st.st_uid, st.st_size, int(st.st_mtime))
    return state


def test_chroot_runs_arm_code_and_returns_its_exit_code(
    exported: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    dest, _ = exported
    work = tmp_path / "work"
    work.mkdir()
    before, files = mountinfo(), tree_state(dest)
    ok = dockerarch("chroot", str(dest), "--bind", f"{work}:/workspace", "--",
                    "sh", "-c", "uname -m; python3 -B -c 'import tinyext; print(tinyext.add(2, 3))'; "
                    "ls /dev; echo made > /workspace/out; test -c /dev/null")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.split()
    assert lines[:2] == ["aarch64", "5"]
    assert "console" not in lines and "null" in lines  # only the device nodes asked for
    assert (work / "out").read_text() == "made\n"
    failed = dockerarch("chroot", str(dest), "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7
    assert mountinfo() == before and tree_state(dest) == files


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_chroot_leaves_nothing_when_killed(
    sig: signal.Signals, exported: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    dest, _ = exported
    before, files = mountinfo(), tree_state(dest)
    child = subprocess.Popen([sys.executable, "-m", "dockerarch", "chroot", str(dest), "--", "sleep", "300"],
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _chrooted_sleep(dest) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _chrooted_sleep(dest), "the command never started"
        child.send_signal(sig)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if sig == signal.SIGINT:
        assert child.returncode == 130
    deadline = time.monotonic() + 30
    while _chrooted_sleep(dest) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _chrooted_sleep(dest), "the chrooted command outlived dockerarch"
    assert mountinfo() == before and tree_state(dest) == files


def _chrooted_sleep(root: Path) -> bool:
    """Whether the test's `sleep 300` runs (inside its PID namespace, so found by its argv)."""
    for proc in Path("/proc").iterdir():
        try:
            # Under QEMU's binfmt entry the argv starts with the interpreter's path.
            argv = (proc / "cmdline").read_bytes()
            if argv.endswith(b"\x00sleep\x00300\x00") and b"dockerarch" not in argv:
                return True
        except OSError:
            continue
    return False


def test_rm_rf_after_chroot_reaches_nothing_else(fidelity: str, tmp_path: Path) -> None:
    dest = tmp_path / "victim-tree"
    done = dockerarch(
        "export-rootfs",
        "--image",
        fidelity,
        "--target",
        "debian-aarch64",
        str(dest),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ran = dockerarch("chroot", str(dest), "--", "true")
    assert ran.returncode == 0, ran.stderr
    subprocess.run(["rm", "-rf", str(dest)], check=True)
    assert (
        Path("/dev/null").exists()
        and Path("/proc/self").exists()
        and os.listdir("/dev/pts") is not None
    )
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
