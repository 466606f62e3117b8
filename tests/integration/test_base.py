"""Base images bootstrapped with mmdebstrap under QEMU, for real (about 2-3 minutes per ARM arch
on a fresh machine; the content-hash cache makes later runs take seconds)."""

from __future__ import annotations

import json
import subprocess

import pytest

from .conftest import dockerarch

BASES = {
    # arch: (tag, platform recorded, uname -m, dpkg arch)
    "armv7": ("dockerarch/base/debian-armv7:bookworm", "linux/arm/v7", "armv7l", "armhf"),
    "aarch64": ("dockerarch/base/debian-aarch64:bookworm", "linux/arm64", "aarch64", "arm64"),
    "amd64": ("dockerarch/base/debian-amd64:bookworm", "linux/amd64", "x86_64", "amd64"),
}


@pytest.fixture(scope="module")
def bootstrapped() -> str:
    done = dockerarch("base", "bootstrap", "--arch", ",".join(BASES), timeout=3600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("arch", sorted(BASES))
def test_base_runs_its_own_arch(bootstrapped: str, arch: str) -> None:
    tag, platform, uname, dpkg_arch = BASES[arch]
    os_, architecture, *variant = platform.split("/")
    inspect = subprocess.run(
        ["docker", "image", "inspect", tag, "--format", "{{.Os}} {{.Architecture}} {{.Variant}}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert inspect.stdout.split() == [os_, architecture, *variant]
    ran = subprocess.run(
        ["docker", "run", "--rm", "--platform", platform, tag, "sh", "-c",
         "uname -m; dpkg --print-architecture"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    assert ran.stdout.split() == [uname, dpkg_arch]


def test_second_bootstrap_hits_the_cache(bootstrapped: str) -> None:
    again = dockerarch("base", "bootstrap", "--arch", "armv7,aarch64", "--no-push")
    assert again.returncode == 0, again.stderr
    lines = again.stdout.strip().splitlines()
    assert len(lines) == 2 and all(": cached " in line for line in lines)


def test_base_ls_lists_them_with_their_source(bootstrapped: str) -> None:
    # an image built FROM a base (as a toolchain image or a runtime image is) carries its
    # labels: base ls does not list it
    derived = "dockerarch-test/from-a-base:1"
    built = subprocess.run(["docker", "build", "-q", "-t", derived, "-"], capture_output=True,
                           text=True, input=f"FROM {BASES['amd64'][0]}\nRUN echo x > /x\n")  # fmt: skip
    assert built.returncode == 0, built.stderr
    try:
        done = dockerarch("base", "ls", "--json")
    finally:
        subprocess.run(["docker", "image", "rm", derived], check=True, capture_output=True)
    assert done.returncode == 0
    listed = json.loads(done.stdout)
    rows = {next(iter(r["tags"])): r for r in listed if r["tags"]}
    for tag, platform, _, _ in BASES.values():
        assert rows[tag]["platform"] == platform
        assert rows[tag]["source"].endswith(" bookworm")
        assert rows[tag]["size_mb"] > 10
    assert not [r for r in listed if derived in r["tags"]
                or any(t.startswith(("dockerarch/toolchain:", "dockerarch/native-python:", "dockerarch/runtime-base:"))
                       for t in r["tags"])], listed  # fmt: skip


def test_bases_are_in_the_registry(bootstrapped: str) -> None:
    for tag, _, _, _ in BASES.values():
        remote = f"127.0.0.1:5000/{tag}"
        assert f"pushed {remote}" in bootstrapped
        manifest = subprocess.run(
            ["docker", "buildx", "imagetools", "inspect", remote, "--raw"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert json.loads(manifest.stdout)["schemaVersion"] == 2


def _image(tag: str) -> tuple[str, str]:
    """(image id, inputs label) of a base."""
    inspect = subprocess.run(["docker", "image", "inspect", tag, "--format",
                              '{{.Id}} {{index .Config.Labels "org.dockerarch.base.inputs"}}'],
                             capture_output=True, text=True, check=True)  # fmt: skip
    image, inputs = inspect.stdout.split()
    return image, inputs


@pytest.mark.serial  # --refresh: the base other builds start from is made again
def test_two_bootstraps_of_the_same_inputs_give_the_same_image(bootstrapped: str) -> None:
    """SOURCE_DATE_EPOCH defaults to the archive's Release date, so rebuilding from the same
    archive state reproduces the image bit for bit (amd64: the quickest to bootstrap). The
    image there already (the fixture's bootstrap, minutes ago on a fresh machine) is the first
    when it was made from the same inputs (the Release date is one); otherwise (the mirror has
    moved on since) a second bootstrap is."""
    tag = BASES["amd64"][0]
    made = [_image(tag)]
    while len(made) < 2 or made[-1][1] != made[-2][1]:
        done = dockerarch("base", "bootstrap", "--arch", "amd64", "--refresh", "--no-push",
                          timeout=1200)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "debian-amd64: made " in done.stdout
        assert "reproducible while the mirror serves the same packages" in done.stderr
        made.append(_image(tag))
        assert len(made) <= 3, "the mirror moved on between two bootstraps"
    assert made[-1][0] == made[-2][0], made


def test_the_ca_store_is_what_debians_own_script_makes(bootstrapped: str) -> None:
    """The bootstrap makes the CA store once, natively (native-ca-certificates): the armv7 base's
    /etc/ssl/certs (links, hash links, bundle) is what the base's own update-ca-certificates
    makes from scratch, its script is the package's again and no diversion is left."""
    tag, platform, _, _ = BASES["armv7"]
    store = (
        'cd /etc/ssl/certs && for f in *; do echo "$f -> $(readlink $f)"; done;'
        " md5sum ca-certificates.crt"
    )
    script = (
        f"{store}; echo ===; dpkg-divert --list | grep -c ca-certificates;"
        " dpkg --verify ca-certificates && echo verified; echo ===;"
        f" update-ca-certificates --fresh >/dev/null && {store}"
    )
    ran = subprocess.run(["docker", "run", "--rm", "--platform", platform, tag, "sh", "-c", script],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    made, checks, fresh = ran.stdout.split("===\n")
    assert checks.split() == ["0", "verified"], ran.stdout[-2000:] + ran.stderr
    assert len(made.splitlines()) > 200 and " -> /usr/share/ca-certificates/mozilla/" in made
    assert made == fresh


@pytest.mark.parametrize("arch", sorted(BASES))
def test_bases_are_merged_usr_without_usrmerges_conversion(bootstrapped: str, arch: str) -> None:
    """merged-/usr as debootstrap and Debian's container images make it: /bin, /lib and /sbin
    are links into /usr and usr-is-merged (from src:usrmerge) says so; usrmerge, which converts
    a tree with a perl script (under QEMU, in a foreign bootstrap) and keeps perl, is not there.
    dpkg --verify: every file is its package's (the native shell and helpers left nothing)."""
    tag, platform, _, _ = BASES[arch]
    script = (
        "for d in /bin /lib /sbin; do echo $d $(readlink $d); done;"
        " dpkg-query -W -f '${db:Status-Status} ${Package} ${Source}\\n' usr-is-merged;"
        " for p in usrmerge perl; do dpkg-query -W -f '${db:Status-Status} ${Package}\\n' $p"
        " 2>/dev/null || echo absent $p; done; dpkg --audit && dpkg --verify && echo verified"
    )
    ran = subprocess.run(["docker", "run", "--rm", "--platform", platform, tag, "sh", "-c", script],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[:4] == ["/bin usr/bin", "/lib usr/lib", "/sbin usr/sbin",
                         "installed usr-is-merged usrmerge"], ran.stdout  # fmt: skip
    # dpkg-query says not-installed for a package it knew of, nothing for one it never saw
    assert [(line.split()[-1], line.split()[0] in ("not-installed", "absent"))
            for line in lines[4:6]] == [("usrmerge", True), ("perl", True)], ran.stdout  # fmt: skip
    # every package's files as it ships them: nothing of the bootstrap's native helpers and shell
    assert lines[-1] == "verified", ran.stdout
