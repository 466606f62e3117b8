"""`dockerarch base import-img` on SD-card images this test makes itself, the way board images
are laid out: a partition table (MBR or GPT), a vfat boot partition and an ext4 root built with
`mke2fs -d` from the armv7 base's files plus every kind of file that a careless copy breaks."""

from __future__ import annotations

import io
import json
import lzma
import os
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import dockerarch

MiB = 1 << 20
BOOT_MB, ROOT_MB = 32, 400
STATE_DIR = Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch"))
TARGETS = """\
targets:
  sdcard-test:
    extends: debian-armv7
    description: a board whose base comes from its SD-card image
  sdcard-test-arm64:
    extends: debian-aarch64
    description: the same, for an aarch64 board
"""
CHECKED = ["srv", "usr/local/bin"]


def sh(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=True, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("project")
    (path / "targets.yaml").write_text(TARGETS)
    return path


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The armv7 base's files plus one of each kind of file an import must keep intact."""
    made = dockerarch("base", "bootstrap", "--arch", "armv7", "--no-push", timeout=3600)
    assert made.returncode == 0, made.stderr
    root = tmp_path_factory.mktemp("rootfs")
    container = sh("docker", "create", "--platform", "linux/arm/v7",
                   "dockerarch/base/debian-armv7:bookworm").stdout.strip()  # fmt: skip
    try:
        with subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE) as exported:
            sh("tar", "-C", str(root), "-xpf", "-", stdin=exported.stdout)
        assert exported.returncode == 0
    finally:
        sh("docker", "rm", container)
    srv, bin_ = root / "srv", root / "usr/local/bin"
    for name in ("suid", "caps"):
        sh("cp", "-p", str(root / "usr/bin/true"), str(bin_ / name))
    os.chmod(bin_ / "suid", 0o4755)
    sh("setcap", "cap_net_raw+ep", str(bin_ / "caps"))
    (srv / "a").write_text("hardlinked\n")
    os.link(srv / "a", srv / "b")
    os.symlink("../srv/a", srv / "link")
    os.mkfifo(srv / "fifo")
    (srv / "user").write_text("owned by uid 1000\n")
    os.chown(srv / "user", 1000, 1000)
    sh("setfattr", "-n", "user.dockerarch", "-v", "kept", str(srv / "a"))
    (srv / "sticky").mkdir()
    os.chmod(srv / "sticky", 0o1777)
    (srv / "setgid").mkdir()
    os.chmod(srv / "setgid", 0o2775)
    return root


def make_image(root: Path | None, out: Path, *, label: str) -> Path:
    """A partitioned disk image: vfat boot partition, then an ext4 root made from ``root``
    (or, with root None, a second vfat partition: an image with no Linux partition)."""
    work = out.parent / f"{out.name}.parts"
    work.mkdir()
    boot, second = work / "boot.vfat", work / "second"
    sh("mkfs.vfat", "-C", str(boot), str(BOOT_MB * 1024))
    if root is None:
        sh("mkfs.vfat", "-C", str(second), str(BOOT_MB * 1024))
    else:
        sh(
            "mke2fs",
            "-q",
            "-t",
            "ext4",
            "-d",
            str(root),
            "-L",
            "rootfs",
            str(second),
            f"{ROOT_MB}M",
        )
    second_mb = second.stat().st_size // MiB
    boot_type, linux_type = ("c", "83") if label == "dos" else (
        "C12A7328-F81F-11D2-BA4B-00A0C93EC93B", "0FC63DAF-8483-4772-8E79-3D69D8477DE4")  # fmt: skip
    if root is None:
        linux_type = boot_type
    sh("truncate", "-s", f"{1 + BOOT_MB + second_mb + 1}M", str(out))
    script = (
        f"label: {label}\n"
        f"start=2048, size={BOOT_MB * 2048}, type={boot_type}\n"
        f"start={(1 + BOOT_MB) * 2048}, size={second_mb * 2048}, type={linux_type}\n"
    )
    sh("sfdisk", "--quiet", str(out), input=script)
    for part, seek in ((boot, 1), (second, 1 + BOOT_MB)):
        sh("dd", f"if={part}", f"of={out}", "bs=1M", f"seek={seek}", "conv=notrunc,sparse",
           "status=none")  # fmt: skip
    sh("rm", "-r", str(work))
    return out


@pytest.fixture(scope="module")
def images(rootfs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same root filesystem as .img (MBR), .img.zip (GPT, as PYNQ ships) and .img.xz."""
    tmp = tmp_path_factory.mktemp("images")
    mbr = make_image(rootfs, tmp / "board-mbr.img", label="dos")
    gpt = make_image(rootfs, tmp / "board-gpt.img", label="gpt")
    with zipfile.ZipFile(
        tmp / "board-gpt.img.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=1
    ) as z:
        z.write(gpt, "board-gpt.img")
    with mbr.open("rb") as src, lzma.open(tmp / "board-mbr.img.xz", "wb", preset=0) as dst:
        while block := src.read(MiB):
            dst.write(block)
    return {"mbr.img": mbr, "gpt.img.zip": tmp / "board-gpt.img.zip",
            "mbr.img.xz": tmp / "board-mbr.img.xz"}  # fmt: skip


def tar_of(image: str, platform: str, *paths: str) -> dict[str, tarfile.TarInfo]:
    """The entries of ``paths`` as the image's own GNU tar sees them, run inside it."""
    done = subprocess.run(
        ["docker", "run", "--rm", "--platform", platform, image, "tar", "--create", "--xattrs",
         "--xattrs-include=*", "--numeric-owner", "--file=-", *paths],
        capture_output=True, check=True, timeout=300,
    )  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        return {m.name: m for m in tar.getmembers()}


def host_state(where: Path) -> tuple[str, list[str]]:
    """The machine's loop devices (nothing but an import makes any), and the mounts where an
    import could leave one: under its work directories (STATE_DIR/sdcard-*) and this run's
    temporary trees (``where``). Mounts elsewhere are other tests' (make test's other worker
    mounts network namespaces, chroots, a stand-in node's engine meanwhile)."""
    loops = sh("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").stdout
    mounts = [line.split(" - ")[0].split(" ", 5)[4] for line in
              Path("/proc/self/mountinfo").read_text().splitlines()]  # fmt: skip
    ours = (f"{STATE_DIR}/sdcard-", f"{where.resolve()}/")
    return loops, sorted(m for m in mounts if m.startswith(ours))


@pytest.fixture
def unchanged_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No loop device, mount or work directory is left behind by the test."""
    where = tmp_path_factory.getbasetemp()
    before = host_state(where)
    leftovers = set(STATE_DIR.glob("sdcard-*"))
    yield
    assert host_state(where) == before
    assert set(STATE_DIR.glob("sdcard-*")) == leftovers


@pytest.mark.parametrize("kind", ["mbr.img", "gpt.img.zip", "mbr.img.xz"])
def test_import_keeps_every_kind_of_file(
    kind: str, images: dict[str, Path], rootfs: Path, project: Path, unchanged_host: None
) -> None:
    tag = f"dockerarch-test/sdcard:{kind.replace('.', '-')}"
    push = ["--push"] if kind == "gpt.img.zip" else ["--no-push"]
    done = dockerarch("base", "import-img", str(images[kind]), "--target", "sdcard-test",
                      "--tag", tag, "--refresh", *push, cwd=project, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"sdcard-test: made {tag} " in done.stdout
    assert "Debian GNU/Linux 12 (bookworm) from partition 2" in done.stderr

    arch = sh(
        "docker", "image", "inspect", tag, "--format", "{{.Os}}/{{.Architecture}}/{{.Variant}}"
    )
    assert arch.stdout.strip() == "linux/arm/v7"
    # its times: the newest in the image (what a card of it clamps to), none set by hand
    label = sh("docker", "image", "inspect", tag, "--format",
               '{{index .Config.Labels "org.dockerarch.base.source-date-epoch"}}').stdout.strip()  # fmt: skip
    newest = max(p.lstat().st_mtime for p in rootfs.rglob("*"))
    assert int(newest) <= int(label) <= images[kind].stat().st_mtime + 1, (label, newest)
    assert f"SOURCE_DATE_EPOCH {label}: the newest file time in the image" in done.stderr
    entries = tar_of(tag, "linux/arm/v7", *CHECKED)
    assert entries["usr/local/bin/suid"].mode == 0o4755
    assert entries["srv/sticky"].mode == 0o1777
    assert entries["srv/setgid"].mode == 0o2775
    assert (entries["srv/user"].uid, entries["srv/user"].gid) == (1000, 1000)
    assert entries["srv/link"].issym() and entries["srv/link"].linkname == "../srv/a"
    assert entries["srv/fifo"].isfifo()
    linked = {entries["srv/a"].islnk(), entries["srv/b"].islnk()}
    assert linked == {True, False}, "srv/a and srv/b must stay one file with two names"
    xattrs = {name: m.pax_headers for name, m in entries.items()}
    assert xattrs["srv/a"].get("SCHILY.xattr.user.dockerarch") == "kept" or \
        xattrs["srv/b"].get("SCHILY.xattr.user.dockerarch") == "kept"  # fmt: skip
    host_caps = sh("getcap", str(rootfs / "usr/local/bin/caps")).stdout
    assert "cap_net_raw=ep" in host_caps
    source = subprocess.run(
        ["tar", "--create", "--xattrs", "--xattrs-include=*", "--file=-", "-C", str(rootfs),
         "usr/local/bin/caps"], capture_output=True, check=True,
    ).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(source)) as expected:
        capability = expected.getmember("usr/local/bin/caps").pax_headers[
            "SCHILY.xattr.security.capability"
        ]
    assert xattrs["usr/local/bin/caps"].get("SCHILY.xattr.security.capability") == capability

    if push == ["--push"]:
        remote = f"127.0.0.1:5000/{tag}"
        assert f"pushed {remote}" in done.stdout
        raw = sh("docker", "buildx", "imagetools", "inspect", remote, "--raw").stdout
        assert json.loads(raw)["schemaVersion"] == 2


def test_second_import_is_cached_and_listed(images: dict[str, Path], project: Path) -> None:
    tag = "dockerarch-test/sdcard:cached"
    first = dockerarch("base", "import-img", str(images["mbr.img"]), "--target", "sdcard-test",
                       "--tag", tag, "--no-push", cwd=project, timeout=900)  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = dockerarch("base", "import-img", str(images["mbr.img"]), "--target", "sdcard-test",
                       "--tag", tag, "--no-push", cwd=project)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"sdcard-test: cached {tag} " in again.stdout
    digest = sh("sha256sum", str(images["mbr.img"])).stdout.split()[0]
    rows = json.loads(dockerarch("base", "ls", "--json").stdout)
    row = next(r for r in rows if tag in r["tags"])
    assert row["source"] == f"board-mbr.img sha256:{digest}"
    assert row["platform"] == "linux/arm/v7"


def test_an_image_of_another_arch_is_refused(images: dict[str, Path], project: Path) -> None:
    done = dockerarch("base", "import-img", str(images["mbr.img"]), "--target",
                      "sdcard-test-arm64", "--tag", "dockerarch-test/sdcard:wrong", "--no-push",
                      cwd=project, timeout=900)  # fmt: skip
    assert done.returncode == 2
    assert "is armv7 (usr/bin/env), but target 'sdcard-test-arm64' is aarch64" in " ".join(
        done.stderr.split()
    )


def _bad_images(images: dict[str, Path], tmp: Path) -> dict[str, tuple[Path, str]]:
    truncated = tmp / "truncated.img"
    truncated.write_bytes(images["mbr.img"].read_bytes()[: 100 * MiB])
    broken_xz = tmp / "broken.img.xz"
    broken_xz.write_bytes(images["mbr.img.xz"].read_bytes()[:-4096])
    zeroed = tmp / "zeroed-root.img"
    zeroed.write_bytes(images["mbr.img"].read_bytes())
    with zeroed.open("r+b") as handle:  # wipe the ext4 superblock of partition 2
        handle.seek((1 + BOOT_MB) * MiB)
        handle.write(bytes(MiB))
    text = tmp / "notes.txt"
    text.write_text("not a disk image\n" * 10000)
    return {
        "truncated": (truncated, "is truncated or corrupt: partition 2 ends at byte"),
        "broken xz": (broken_xz, "is truncated or corrupt"),
        "wiped superblock": (zeroed, "is truncated or corrupt: its Linux partition holds no readable filesystem"),
        "no linux partition": (make_image(None, tmp / "no-linux.img", label="dos"),
                               "has no Linux root partition"),
        "text file": (text, "is not a disk image: it has no MBR or GPT partition table"),
    }  # fmt: skip


def test_bad_images_are_refused_clearly(
    images: dict[str, Path], project: Path, tmp_path: Path, unchanged_host: None
) -> None:
    for what, (path, message) in _bad_images(images, tmp_path).items():
        done = dockerarch("base", "import-img", str(path), "--target", "sdcard-test", "--tag",
                          "dockerarch-test/sdcard:bad", "--no-push", cwd=project)  # fmt: skip
        assert done.returncode == 2, (what, done.stderr)
        assert f"error: {path}" in done.stderr and message in " ".join(done.stderr.split()), what
        assert "Traceback" not in done.stderr
    assert dockerarch("base", "import-img", str(tmp_path / "missing.img"), "--target",
                      "sdcard-test", cwd=project).returncode == 2  # fmt: skip


def test_interrupted_import_leaves_no_loop_device_or_mount(
    images: dict[str, Path], project: Path, unchanged_host: None
) -> None:
    image = images["mbr.img"]
    earlier = set(
        sh("losetup", "--noheadings", "--output", "NAME", "--associated", str(image)).stdout.split()
    )
    child = subprocess.Popen(
        # env --default-signal: as from a terminal, even when this runs as a shell's background job
        # (which inherits SIGINT ignored, and Python then never raises KeyboardInterrupt)
        ["env", "--default-signal=INT", sys.executable, "-m", "dockerarch", "base", "import-img", str(image),
         "--target", "sdcard-test", "--tag",
         "dockerarch-test/sdcard:interrupted", "--refresh", "--no-push"],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    # a loop device of this run (an earlier test's may still be detaching)
    while (
        not set(
            sh(
                "losetup", "--noheadings", "--output", "NAME", "--associated", str(image)
            ).stdout.split()
        )
        - earlier
    ):
        assert child.poll() is None and time.monotonic() < deadline, (
            "the loop device never appeared"
        )
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)  # while the root partition is mounted and being read
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert not sh("losetup", "--associated", str(image)).stdout.strip()
