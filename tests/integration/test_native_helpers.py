"""dpkg's helper programs (dpkg-deb, dpkg-split, tar, rm) run natively in foreign roots: in a base
bootstrap's chroot (native-dpkg-helpers, mmdebstrap hooks) and in a hybrid build's emulated apt
steps (apt-install). Each test makes the ARM root's own helpers unusable (stubs that fail), so a
package installs only if dpkg ran this machine's. No network: the package is one the test builds,
served from a file: repository."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from dockerarch import base, paths

from .conftest import dockerarch

ARMV7 = ("dockerarch/base/debian-armv7:bookworm", "linux/arm/v7")
AMD64 = "dockerarch/base/debian-amd64:bookworm"
PROBE = "dockerarch-probe_1.0_armhf.deb"
# The emulated helpers, made to fail: a package installs only when dpkg runs this machine's.
STUB = '#!/bin/sh\necho "the emulated $0 ran" >&2\nexit 97\n'
STUB_HELPERS = "for p in tar dpkg-deb dpkg-split; do printf '%s' \"$STUB\" > /usr/bin/$p; done"


def run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


def deb(tmp: Path, name: str, version: str, arch: str, postinst: str = "") -> Path:
    """A real .deb, built with this machine's dpkg-deb: one file and maybe a postinst."""
    tree = tmp / f"{name}-tree"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\n"
        "Maintainer: dockerarch tests <tests@example.invalid>\nDescription: a test package\n"
    )
    if postinst:
        (tree / "DEBIAN" / "postinst").write_text(postinst)
        (tree / "DEBIAN" / "postinst").chmod(0o755)
    (tree / "usr" / "share" / name).mkdir(parents=True)
    (tree / "usr" / "share" / name / "hello").write_text(f"hello from {name}\n")
    out = tmp / f"{name}_{version}_{arch}.deb"
    built = run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(out)])
    assert built.returncode == 0, built.stderr
    return out


def export(image: str, platform: str, dest: Path) -> Path:
    """An image's root filesystem as a directory (what mmdebstrap's chroot is)."""
    made = run(["docker", "create", "--platform", platform, image, "true"])
    assert made.returncode == 0, made.stderr
    container = made.stdout.strip()
    dest.mkdir()
    try:
        exported = subprocess.run(f"docker export {container} | tar -x -C {dest}", shell=True,
                                  capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert exported.returncode == 0, exported.stderr
    finally:
        run(["docker", "rm", container])
    return dest


@pytest.fixture(scope="module")
def bases() -> None:
    done = dockerarch("base", "bootstrap", "--arch", "amd64,armv7", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    return deb(tmp_path, "dockerarch-probe", "1.0", "armhf",
               postinst="#!/bin/sh\nset -e\necho configured > /var/lib/dockerarch-probe\n")  # fmt: skip


def test_the_bootstrap_hook_gives_dpkg_native_helpers_and_leaves_nothing(
    bases: None, probe: Path, tmp_path: Path
) -> None:
    root = export(*ARMV7, tmp_path / "root")
    # The hook reads the chroot's dpkg release from the dpkg .deb mmdebstrap downloaded.
    status = (root / "var/lib/dpkg/status").read_text().split("\n\n")
    (version,) = [
        line.split(": ", 1)[1] for stanza in status if stanza.startswith("Package: dpkg\n")
        for line in stanza.splitlines() if line.startswith("Version: ")
    ]  # fmt: skip
    archives = root / "var/cache/apt/archives"
    deb(tmp_path, "dpkg", version, "armhf").rename(archives / f"dpkg_{version}_armhf.deb")
    (root / "tmp" / PROBE).write_bytes(probe.read_bytes())
    for helper in ("tar", "dpkg-deb", "dpkg-split", "rm"):
        (root / "usr/bin" / helper).write_text(STUB)
    install = ["chroot", str(root), "env", f"PATH={base.HELPERS_BIN}:/usr/sbin:/usr/bin:/sbin:/bin",
               "dpkg", "--install", f"/tmp/{PROBE}"]  # fmt: skip
    emulated = run(install)
    assert emulated.returncode != 0 and "the emulated" in emulated.stderr, emulated.stderr

    linked = run(["sh", str(base.HELPERS_HOOK), "link", str(root)])
    assert linked.returncode == 0, linked.stderr
    assert "dpkg-deb, dpkg-split, tar and rm run natively" in linked.stdout, linked.stdout
    native = run(install)
    assert native.returncode == 0, native.stdout + native.stderr
    assert (root / "var/lib/dockerarch-probe").read_text() == "configured\n"
    assert (
        root / "usr/share/dockerarch-probe/hello"
    ).read_text() == "hello from dockerarch-probe\n"
    conf = root / "etc/apt/apt.conf.d/00dockerarch-native-helpers"
    assert f'DPkg::Path "{base.HELPERS_BIN}:' in conf.read_text()  # apt's dpkg runs find them

    # usrmerge's postinst removes a /lib64 no package owns: the essential hook links it again.
    (root / "lib64").unlink()
    try:
        assert run(["sh", str(base.HELPERS_HOOK), "link", str(root)]).returncode == 0
        assert (root / "lib64").is_symlink() and run(install).returncode == 0
    finally:  # the essential hook's native shell is a mount (unlink unmounts it)
        unlinked = run(["sh", str(base.HELPERS_HOOK), "unlink", str(root)])
    assert unlinked.returncode == 0 and unlinked.stdout == "", unlinked.stdout + unlinked.stderr
    left = ["usr/lib/dockerarch-native", "usr/lib/x86_64-linux-gnu", "usr/lib64", "lib64", conf]
    assert [p for p in left if (root / p).exists() or (root / p).is_symlink()] == []


def mounted(path: Path) -> bool:
    return run(["mountpoint", "-q", str(path)]).returncode == 0


def test_the_essential_hook_runs_maintainer_scripts_in_this_machines_shell(
    bases: None, tmp_path: Path
) -> None:
    """Called again as the essential hook (before the remaining packages), the hook puts this
    machine's dash over the chroot's /usr/bin/dash, what /bin/sh runs: a package's postinst then
    runs in a native shell. The chroot's own dash is made a stub that fails (run by the emulated
    bash), so the postinst runs only in this machine's. Not when the chroot's dash is another
    upstream release. unlink unmounts it: the chroot's own file is back, and nothing of the hook
    is left."""
    root = export(*ARMV7, tmp_path / "root")
    dash = root / "usr/bin/dash"
    stub = '#!/bin/bash\necho "the emulated dash ran" >&2\nexit 97\n'
    dash.write_text(stub)
    status = root / "var/lib/dpkg/status"
    real_status = status.read_text()
    postinst = "#!/bin/sh\nset -e\necho configured > /var/lib/dockerarch-probe\n"
    (root / "tmp" / PROBE).write_bytes(deb(tmp_path, "dockerarch-probe", "1.0", "armhf",
                                           postinst=postinst).read_bytes())  # fmt: skip
    install = ["chroot", str(root), "env", f"PATH={base.HELPERS_BIN}:/usr/sbin:/usr/bin:/sbin:/bin",
               "dpkg", "--install", f"/tmp/{PROBE}"]  # fmt: skip
    version = re.search(r"(?m)^Package: dpkg\n(?:.+\n)*?Version: (.+)$", real_status)
    assert version, "no dpkg in the base's status"  # the hook reads dpkg's release from its .deb
    deb(tmp_path, "dpkg", version.group(1), "armhf").rename(
        root / f"var/cache/apt/archives/dpkg_{version.group(1)}_armhf.deb"
    )
    try:
        first = run(["sh", str(base.HELPERS_HOOK), "link", str(root)])
        assert "run natively" in first.stdout and not mounted(dash), first.stdout + first.stderr

        stanzas = [re.sub(r"(?m)^Version: .*$", "Version: 0.5.99-1", stanza)
                   if stanza.startswith("Package: dash\n") else stanza
                   for stanza in real_status.split("\n\n")]  # fmt: skip
        status.write_text("\n\n".join(stanzas))
        other = run(["sh", str(base.HELPERS_HOOK), "link", str(root)])
        assert other.returncode == 0 and not mounted(dash), other.stdout + other.stderr
        assert "the chroot's dash is 0.5.99, this machine's 0.5.12" in other.stdout, other.stdout

        status.write_text(real_status)
        again = run(["sh", str(base.HELPERS_HOOK), "link", str(root)])
        assert again.returncode == 0 and mounted(dash), again.stdout + again.stderr
        assert "/bin/sh (dash 0.5.12) runs natively" in again.stdout, again.stdout
        installed = run(install)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert (root / "var/lib/dockerarch-probe").read_text() == "configured\n"
        assert dash.read_bytes() == Path("/usr/bin/dash").read_bytes()  # this machine's, mounted

        unlinked = run(["sh", str(base.HELPERS_HOOK), "unlink", str(root)])
        assert unlinked.returncode == 0, unlinked.stdout + unlinked.stderr
        assert not mounted(dash) and dash.read_text() == stub
        assert not (root / "usr/lib/dockerarch-native").exists()
    finally:
        if mounted(dash):
            run(["umount", str(dash)])


@pytest.mark.parametrize("stage", ["plain", "with-x86-64-paths"])
def test_apt_install_gives_dpkg_native_helpers(
    bases: None, probe: Path, tmp_path: Path, stage: str
) -> None:
    """A hybrid build's emulated apt step: the x86-64 apt of the native-python stage installs
    for armhf from lists fetched natively; dpkg's helpers are x86-64 programs, started directly
    (links to the loader and its libraries for the step) or, when the stage has those paths
    already (the toolchain's), through wrappers, and the stage is left as it was."""
    native = export(AMD64, "linux/amd64", tmp_path / "native")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / PROBE).write_bytes(probe.read_bytes())
    data = probe.read_bytes()
    (repo / "Packages").write_text(
        "Package: dockerarch-probe\nVersion: 1.0\nArchitecture: armhf\n"
        "Maintainer: dockerarch tests <tests@example.invalid>\n"
        f"Filename: ./{PROBE}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        "Description: a test package\n"
    )
    etc_apt = tmp_path / "etc-apt"
    for part in ("apt.conf.d", "preferences.d", "sources.list.d", "trusted.gpg.d"):
        (etc_apt / part).mkdir(parents=True)
    (etc_apt / "sources.list").write_text("deb [trusted=yes] file:/repo ./\n")
    lists, state = tmp_path / "lists", tmp_path / "state"
    lists.mkdir()
    state.mkdir()
    toolchain = paths.data_path("toolchain")
    # The package-lists stage: the x86-64 apt fetches the target's lists.
    fetched = run(["docker", "run", "--rm", "--network", "none",
                   "-v", f"{etc_apt}:/run/target-apt:ro", "-v", f"{repo}:/repo:ro",
                   "-v", f"{lists}:/lists", "-v", f"{state}:/state", "-v", f"{toolchain}:/run/dockerarch:ro",
                   AMD64, "sh", "/run/dockerarch/update-lists", "armhf", "/run/target-apt", "/lists",
                   "/state/lists"])  # fmt: skip
    assert fetched.returncode == 0 and (state / "lists").read_text() == "fetched\n", fetched.stderr
    before = "mkdir /usr/lib/x86_64-linux-gnu; " if stage == "with-x86-64-paths" else ""
    script = (
        f"{before}{STUB_HELPERS}; "
        "sh /run/dockerarch/apt-install /run/dockerarch-native /state/lists dockerarch-probe && "
        "echo ===; cat /var/lib/dockerarch-probe; dpkg --audit;"
        " ls -d /lib64 /usr/lib/x86_64-linux-gnu /tmp/dockerarch-apt.* 2>/dev/null; true"
    )
    ran = run(["docker", "run", "--rm", "--network", "none", "--platform", ARMV7[1], "-e", f"STUB={STUB}",
               "-v", f"{native}:/run/dockerarch-native:ro", "-v", f"{repo}:/repo:ro",
               "-v", f"{lists}:/var/lib/apt/lists", "-v", f"{state}:/state:ro",
               "-v", f"{etc_apt / 'sources.list'}:/etc/apt/sources.list:ro",
               "-v", f"{toolchain}:/run/dockerarch:ro", ARMV7[0], "sh", "-c", script])  # fmt: skip
    assert ran.returncode == 0 and "===" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "dpkg's helpers (dpkg-deb, dpkg-split, tar, rm) natively" in ran.stdout
    assert "Setting up dockerarch-probe (1.0)" in ran.stdout
    after = ran.stdout.split("===\n", 1)[1].split()
    # Configured, a clean dpkg database, and the x86-64 paths as the stage had them.
    expected = ["/usr/lib/x86_64-linux-gnu"] if stage == "with-x86-64-paths" else []
    assert after == ["configured", *expected], ran.stdout + ran.stderr
