from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dockerarch import base, hostapt, process
from dockerarch.errors import CommandFailedError, ConfigError, UsageError
from dockerarch.targets import load_targets

TARGETS = load_targets()


@pytest.fixture(autouse=True)
def _host_mirror(monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = hostapt.DebianMirror("http://mirror.example.invalid/debian", "/k.gpg", "bookworm")
    monkeypatch.setattr(hostapt, "read_sources", list)
    monkeypatch.setattr(hostapt, "debian_mirror", lambda sources: mirror)
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


def _request(keyring: Path, **kw: object) -> base.BaseRequest:
    return base.make_request(TARGETS["debian-armv7"], keyring=str(keyring), **kw)  # type: ignore[arg-type]


def test_debian_targets_take_the_host_mirror(tmp_path: Path) -> None:
    keyring = tmp_path / "k.gpg"
    keyring.write_bytes(b"key")
    request = _request(keyring)
    assert request.mirror == "http://mirror.example.invalid/debian"
    assert request.tag == "dockerarch/base/debian-armv7:bookworm"
    assert request.include == ("ca-certificates",)


def test_every_input_changes_the_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keyring = tmp_path / "k.gpg"
    keyring.write_bytes(b"key")
    first = _request(keyring)
    assert first.inputs_hash() == _request(keyring).inputs_hash()  # stable
    variants = [
        replace(first, suite="trixie"),
        replace(first, mirror="http://other.example.invalid/debian"),
        replace(first, include=("ca-certificates", "python3")),
        replace(first, snapshot="http://snapshot.example.invalid/archive/debian/20250520T000000Z"),
        replace(first, source_date_epoch=1700000000),
        replace(first, target=TARGETS["debian-aarch64"]),
    ]
    hashes = {v.inputs_hash() for v in variants}
    assert len(hashes) == len(variants) and first.inputs_hash() not in hashes
    keyring.write_bytes(b"another key")
    assert _request(keyring).inputs_hash() != first.inputs_hash()


def test_suite_override_changes_the_tag(tmp_path: Path) -> None:
    keyring = tmp_path / "k.gpg"
    keyring.write_bytes(b"key")
    assert _request(keyring, suite="trixie").tag == "dockerarch/base/debian-armv7:trixie"


def test_targets_without_a_mirror_must_be_given_one() -> None:
    with pytest.raises(UsageError) as caught:
        base.make_request(TARGETS["rpi3"])
    assert "--mirror URI" in caught.value.message and "targets.rpi3.mirror" in caught.value.message


def test_missing_keyring(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        base.make_request(TARGETS["debian-armv7"], keyring=str(tmp_path / "none.gpg"))


def test_bad_source_date_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keyring = tmp_path / "k.gpg"
    keyring.write_bytes(b"key")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        _request(keyring)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert _request(keyring).source_date_epoch == 1700000000


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"suite": "bookworm;id"}, "--suite"),
        ({"mirror": "ftp://x.example.invalid/debian"}, "--mirror"),
        ({"snapshot": "http://x.example.invalid/a b"}, "--snapshot"),
        ({"include": ["python3", "rm -rf"]}, "--include lists 'rm -rf'"),
    ],
)
def test_bad_bootstrap_inputs(tmp_path: Path, kw: dict[str, object], message: str) -> None:
    keyring = tmp_path / "k.gpg"
    keyring.write_bytes(b"key")
    with pytest.raises(UsageError) as caught:
        _request(keyring, **kw)
    assert message in caught.value.message


def test_bootstrap_progress_says_the_hooks_in_words() -> None:
    said: list[str] = []

    def hook(kind: str, script: Path, mode: str) -> str:
        return (
            f"I: running {kind} in shell: sh -c 'sh {script} {mode} \"$1\"' exec /tmp/mmdebstrap.x"
        )

    for line in (
        "I: extracting archives...",
        hook("--extract-hook", base.HELPERS_HOOK, "link"),
        "native-dpkg-helpers: dpkg-deb, dpkg-split, tar and rm run natively (this machine's) in the chroot",
        f"I: running --setup-hook directly: {base.MERGED_USR_HOOKS}/setup00.sh /tmp/mmdebstrap.x",
        "I: installing essential packages...",
        f"I: running --essential-hook directly: {base.MERGED_USR_HOOKS}/essential00.sh /tmp/mm.x",
        hook("--essential-hook", base.HELPERS_HOOK, "link"),
        hook("--essential-hook", base.CA_HOOK, "hold"),
        "dpkg: warning: not said",
        hook("--customize-hook", base.HELPERS_HOOK, "unlink"),
        hook("--customize-hook", base.CA_HOOK, "run"),
        "W: something mmdebstrap warns of",
    ):
        base._mmdebstrap_line(line, said.append)
    assert said == [
        "I: extracting archives...",
        "native-dpkg-helpers: dpkg-deb, dpkg-split, tar and rm run natively (this machine's) in the chroot",
        "merged /usr: the links /bin, /lib, /sbin -> usr/ (as debootstrap makes them)",
        "I: installing essential packages...",
        "merged /usr: usr-is-merged installed (no usrmerge conversion)",
        "CA store: held until the end (made once, natively)",
        "CA store: made natively",
        "W: something mmdebstrap warns of",
    ]
    # Shipped with the package, beside the toolchain helpers.
    assert base.CA_HOOK.is_file() and base.HELPERS_HOOK.is_file()


APT_OUT_OF_STEP = (
    "I: running apt-get update...\n"
    "E: Failed to fetch http://mirror.example.invalid/debian/dists/trixie/main/binary-armhf/"
    "Packages.xz  File has unexpected size (9246492 != 9246996). Mirror sync in progress? "
    "[IP: 192.0.2.1 80]\n"
    "E: Some index files failed to download. They have been ignored, or old ones used instead.\n"
    "E: mmdebstrap failed to run"
)


@pytest.mark.parametrize(
    ("output", "said"),
    [
        (APT_OUT_OF_STEP, "trixie/main/binary-armhf/Packages.xz: File has unexpected size (9246492 != 9246996)"),
        ("E: Failed to fetch http://m.invalid/debian/dists/bookworm/main/binary-arm64/by-hash/SHA256/ab  Hash Sum mismatch",
         "bookworm/main/binary-arm64/by-hash/SHA256/ab: Hash Sum mismatch"),
        ("E: Failed to fetch http://m.invalid/debian/dists/x/Release  404  Not Found", None),
        ("E: Unable to locate package ca-certificates", None),
    ],
)  # fmt: skip
def test_a_mirror_out_of_step_with_its_release_file_is_recognised(
    output: str, said: str | None
) -> None:
    assert base.mirror_out_of_step(output) == said


def test_a_bootstrap_on_a_mirror_out_of_step_says_so_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """apt's 'unexpected size ... Mirror sync in progress?' is the mirror's state, not the user's
    input: the error names the mirror, the suite and the lists, and the ways around it."""
    keyring = tmp_path / "k.gpg"
    keyring.write_bytes(b"key")
    request = base.make_request(TARGETS["trixie-armv7"], keyring=str(keyring))

    def failing(args: list[str], **kw: object) -> None:
        raise CommandFailedError(
            f"'{args[0]}' failed with exit code 25", returncode=25, output=APT_OUT_OF_STEP
        )

    monkeypatch.setattr(process, "which", lambda *a, **kw: "/usr/bin/mmdebstrap")
    monkeypatch.setattr(base, "MERGED_USR_HOOKS", tmp_path)
    monkeypatch.setattr(process, "stream", failing)
    with pytest.raises(CommandFailedError) as raised:
        base._mmdebstrap(request, tmp_path / "rootfs.tar", None, lambda line: None)
    message = raised.value.message
    assert (
        "The mirror http://mirror.example.invalid/debian serves trixie's armhf package lists"
        in message
    )
    assert "trixie/main/binary-armhf/Packages.xz: File has unexpected size" in message
    assert "trixie-armv7: {mirror: URL}" in message and "trixie-armv7: {suite: stable}" in message
    assert raised.value.returncode == 25 and "\n" not in raised.value.render(width=10_000)

    def other(args: list[str], **kw: object) -> None:
        raise CommandFailedError(
            "'mmdebstrap' failed with exit code 1", returncode=1, output="E: no space left"
        )

    monkeypatch.setattr(process, "stream", other)
    with pytest.raises(
        CommandFailedError, match="failed with exit code 1"
    ):  # any other failure as it was
        base._mmdebstrap(request, tmp_path / "rootfs.tar", None, lambda line: None)


def test_bootstrap_without_mmdebstraps_merged_usr_hooks_says_so_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An mmdebstrap older than 1.0 has no hooks: without them bookworm's base would be converted
    by usrmerge (and keep perl), another base than the one the cache key names."""
    request = base.make_request(TARGETS["trixie-armv7"], mirror="http://mirror.example.invalid/d")
    ran: list[list[str]] = []
    monkeypatch.setattr(process, "which", lambda *a, **kw: "/usr/bin/mmdebstrap")
    monkeypatch.setattr(process, "stream", lambda args, **kw: ran.append(args))
    monkeypatch.setattr(base, "MERGED_USR_HOOKS", tmp_path / "missing")
    with pytest.raises(ConfigError) as raised:
        base._mmdebstrap(request, tmp_path / "rootfs.tar", None, lambda line: None)
    assert f"mmdebstrap's hooks {tmp_path / 'missing'} are missing" in raised.value.message
    assert "mmdebstrap 1.0 or newer" in (raised.value.fix or "") and ran == []

    monkeypatch.setattr(base, "MERGED_USR_HOOKS", tmp_path)
    with pytest.raises(ConfigError, match="produced no root filesystem"):
        base._mmdebstrap(request, tmp_path / "rootfs.tar", None, lambda line: None)
    assert f"--hook-dir={tmp_path}" in ran[0] and ran[0].index(f"--hook-dir={tmp_path}") < ran[
        0
    ].index(request.suite)


def test_mmdebstrap_runs_in_its_own_mount_namespace_only_where_this_process_may_mount(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With CAP_SYS_ADMIN (root on a machine) mmdebstrap runs under unshare --mount: the hooks'
    bind mount dies with it; without (root in a container) it runs as it is."""
    status = tmp_path / "status"
    real = Path.read_text

    def read(path: Path, *a: object, **kw: object) -> str:
        return real(status) if str(path) == "/proc/self/status" else real(path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read)
    status.write_text("Name:\tpython3\nCapEff:\t000001ffffffffff\n")
    assert base._own_mount_namespace() == ["unshare", "--mount", "--propagation", "private", "--"]
    status.write_text("Name:\tpython3\nCapEff:\t00000000a80425fb\n")  # Docker's default set
    assert base._own_mount_namespace() == []


def test_base_ls_lists_the_bases_not_the_images_built_from_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every image FROM a base inherits its labels: a toolchain image, a runtime base, a build's
    runtime image. Only the image made from the root filesystem (one layer) is a base."""
    from dockerarch import engine

    def image(tag: str, layers: int) -> engine.LocalImage:
        return engine.LocalImage(id=f"sha256:{tag}", tags=(tag,), platform="linux/arm/v7",
                                 size=1, created="2026-11-27 10:00:00",
                                 labels={base.LABEL_PREFIX: "1"}, layers=layers)  # fmt: skip

    labelled = [image("dockerarch/toolchain:arm-linux-gnueabihf-gcc12-1", 9),
                image("dockerarch/base/debian-armv7:bookworm", 1),
                image("dockerarch/runtime-base:debian-armv7-1", 2),
                image("mine/pynq:v3", 1)]  # fmt: skip
    asked: list[str] = []
    monkeypatch.setattr(engine, "images_labelled", lambda label: asked.append(label) or labelled)
    assert [i.tags[0] for i in base.local_bases()] == [
        "dockerarch/base/debian-armv7:bookworm", "mine/pynq:v3"]  # fmt: skip
    assert asked == [base.LABEL_PREFIX]
