"""Base images for targets, made from the distro's own packages with mmdebstrap under QEMU.

Docker Hub is out of reach here (and behind many users' firewalls): every build starts from a base
bootstrapped from the target's Debian-family archive, imported with the right platform, tagged
``target.base_image`` in the engine and pushed to the local registry.

Cache: the image carries a label with a hash of every input that shaped it (distro, suite, arch,
mirror, keyring contents, included packages, snapshot, SOURCE_DATE_EPOCH); an unchanged request
reuses it, ``--refresh`` rebuilds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dockerarch import engine, hostapt, paths, process, sdcard
from dockerarch.errors import CommandFailedError, ConfigError, UsageError
from dockerarch.files import context_name, sha256_file
from dockerarch.sdcard import Progress
from dockerarch.targets import BoardTarget

LABEL_PREFIX = "org.dockerarch.base"
FORMAT = "2"  # bump when the way bases are made changes, to invalidate every cache
DEFAULT_INCLUDE = ("ca-certificates",)
CA_HOOK = paths.data_path("bootstrap", "native-ca-certificates")
HELPERS_HOOK = paths.data_path("bootstrap", "native-dpkg-helpers")
# Where HELPERS_HOOK puts dpkg's native helpers inside the chroot (on the host it does not exist).
HELPERS_BIN = "/usr/lib/dockerarch-native/bin"
# mmdebstrap's own hooks: merged-/usr made the way debootstrap and Debian's container images make
# it (the directory links and the usr-is-merged package), where the suite has usr-is-merged.
MERGED_USR_HOOKS = Path("/usr/share/mmdebstrap/hooks/maybe-merged-usr")
STATE_DIR = Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch"))


def _hash(inputs: dict[str, object]) -> str:
    """The cache key of a base: a digest of every input that shaped it."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class BaseRequest:
    target: BoardTarget
    suite: str
    mirror: str
    keyring: str | None
    keyring_sha256: str | None  # read once, when the request is made
    include: tuple[str, ...]
    snapshot: str | None
    source_date_epoch: int | None

    @property
    def tag(self) -> str:
        name = self.target.base_image.split("@", 1)[0].rsplit(":", 1)[0]
        return f"{name}:{self.suite}"

    def inputs(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "distro": self.target.distro,
            "suite": self.suite,
            "arch": self.target.debian_arch,
            "platform": self.target.platform,
            "mirror": self.snapshot or self.mirror,
            "keyring_sha256": self.keyring_sha256,
            "include": sorted(self.include),
            "variant": "minbase",
            "source_date_epoch": self.source_date_epoch,
        }

    def inputs_hash(self) -> str:
        return _hash(self.inputs())


@dataclass(frozen=True, kw_only=True)
class BaseResult:
    tag: str
    image_id: str
    pushed: str | None
    cached: bool
    seconds: float
    note: str = ""  # what the user should know about it, e.g. whether it is reproducible


def resolve_mirror(target: BoardTarget, mirror: str | None) -> str:
    if mirror:
        return mirror
    if target.mirror == "host":
        return hostapt.debian_mirror(hostapt.read_sources()).uri
    if target.mirror:
        return target.mirror
    raise UsageError(
        f"Target '{target.name}' ({target.distro} {target.suite}) has no mirror: dockerarch "
        "writes no package archive's address into its sources",
        fix=f"Pass --mirror URI, or set targets.{target.name}.mirror in your targets.yaml.",
    )


def make_request(
    target: BoardTarget,
    *,
    suite: str | None = None,
    mirror: str | None = None,
    keyring: str | None = None,
    include: Sequence[str] = (),
    snapshot: str | None = None,
) -> BaseRequest:
    _check_inputs(suite=suite, mirror=mirror, snapshot=snapshot, include=include)
    resolved_mirror = resolve_mirror(target, mirror)
    keyring = keyring or target.keyring
    if keyring and not Path(keyring).is_file():
        raise ConfigError(
            f"The keyring {keyring} for target '{target.name}' does not exist",
            fix="Install the distro's keyring package (e.g. ubuntu-keyring) or pass --keyring FILE.",
        )
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None and not epoch.isdigit():
        raise UsageError(f"SOURCE_DATE_EPOCH={epoch!r} is not a number of seconds")
    return BaseRequest(
        target=target,
        suite=suite or target.suite,
        mirror=resolved_mirror,
        keyring=keyring,
        keyring_sha256=hashlib.sha256(Path(keyring).read_bytes()).hexdigest() if keyring else None,
        include=tuple(dict.fromkeys([*DEFAULT_INCLUDE, *include])),
        snapshot=snapshot,
        source_date_epoch=int(epoch) if epoch is not None else None,
    )


_SUITE = re.compile(r"^[a-z][a-z0-9-]*$")
_URI = re.compile(r"^(https?|file)://[A-Za-z0-9._~:/%+@-]+$")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def _check_inputs(
    *, suite: str | None, mirror: str | None, snapshot: str | None, include: Sequence[str]
) -> None:
    if suite is not None and not _SUITE.match(suite):
        raise UsageError(f"--suite {suite!r} is not a release name", fix="For example: bookworm.")
    for option, uri in (("--mirror", mirror), ("--snapshot", snapshot)):
        if uri is not None and not _URI.match(uri):
            raise UsageError(
                f"{option} {uri!r} is not an http(s):// or file:// URI",
                fix="Give the archive's URI, like the ones in /etc/apt/sources.list.d.",
            )
    for package in include:
        if not _PACKAGE.match(package):
            raise UsageError(
                f"--include lists {package!r}, which is not a Debian package name",
                fix="Separate package names with commas: --include python3,python3-pip.",
            )


def local_bases() -> list[engine.LocalImage]:
    """The engine's base images, newest first: those dockerarch made from a root filesystem
    (bootstrapped or imported: one layer, with the label). Every image built FROM a base (a
    toolchain image, a runtime base, a build's runtime image) inherits the label, not the
    single layer."""
    return [i for i in engine.images_labelled(LABEL_PREFIX) if i.layers == 1]


def _cached_result(
    tag: str, inputs_hash: str, *, refresh: bool, push_to: str | None, started: float
) -> BaseResult | None:
    """The image already made from the same inputs (pushed again if asked), unless refresh."""
    if refresh:
        return None
    image = engine.image_labels(tag)
    if image is None or image[1].get(f"{LABEL_PREFIX}.inputs") != inputs_hash:
        return None
    pushed = engine.push_copy(tag, push_to) if push_to else None
    return BaseResult(
        tag=tag, image_id=image[0], pushed=pushed, cached=True, seconds=time.monotonic() - started
    )


def _import(
    context: Path, *, tag: str, platform: str, labels: dict[str, str], epoch: int | None,
    push_to: str | None, started: float, note: str,
) -> BaseResult:  # fmt: skip
    (context / "Dockerfile").write_text(
        '# A root filesystem made by dockerarch.\nFROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n'
    )
    image_id = engine.import_rootfs(
        context, platform=platform, tag=tag, labels={LABEL_PREFIX: "1", **labels},
        source_date_epoch=epoch,
    )  # fmt: skip
    pushed = engine.push_copy(tag, push_to) if push_to else None
    return BaseResult(
        tag=tag, image_id=image_id, pushed=pushed, cached=False,
        seconds=time.monotonic() - started, note=note,
    )  # fmt: skip


def bootstrap(
    request: BaseRequest,
    *,
    refresh: bool = False,
    push_to: str | None = None,
    progress: Progress = lambda line: None,
) -> BaseResult:
    started = time.monotonic()
    cached = _cached_result(request.tag, request.inputs_hash(), refresh=refresh, push_to=push_to,
                            started=started)  # fmt: skip
    if cached is not None:
        return cached
    epoch = request.source_date_epoch
    if epoch is None:
        epoch = release_epoch(request)
    if epoch is None:
        note = ("not reproducible: the archive's Release date could not be read, so "
                "timestamps are today's; set SOURCE_DATE_EPOCH")  # fmt: skip
    elif request.snapshot:
        note = f"reproducible: snapshot {request.snapshot}, SOURCE_DATE_EPOCH={epoch}"
    else:
        note = (f"reproducible while the mirror serves the same packages (SOURCE_DATE_EPOCH="
                f"{epoch}, its Release date); pass --snapshot URI to pin them")  # fmt: skip
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="base-", dir=STATE_DIR) as tmp:
        context = Path(tmp)
        _mmdebstrap(request, context / "rootfs.tar", epoch, progress)
        labels = {
            f"{LABEL_PREFIX}.inputs": request.inputs_hash(),
            f"{LABEL_PREFIX}.target": request.target.name,
            f"{LABEL_PREFIX}.source": f"{request.snapshot or request.mirror} {request.suite}",
            f"{LABEL_PREFIX}.include": ",".join(request.include),
            f"{LABEL_PREFIX}.source-date-epoch": str(epoch) if epoch is not None else "",
        }
        return _import(
            context, tag=request.tag, platform=request.target.platform, labels=labels,
            epoch=epoch, push_to=push_to, started=started, note=note,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ImageImport:
    """Import the root partition of a board's SD-card image as a target's base."""

    target: BoardTarget
    image: Path
    image_sha256: str
    partition: int | None
    tag: str
    epoch: int | None = None  # SOURCE_DATE_EPOCH given; None: the newest file time in the image

    def inputs(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "kind": "sdcard",
            "sha256": self.image_sha256,
            "partition": self.partition,
            "platform": self.target.platform,
            "epoch": self.epoch if self.epoch is not None else "newest file",
        }

    def inputs_hash(self) -> str:
        return _hash(self.inputs())


_TAG = re.compile(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")


# What mmdebstrap's root mode needs to unpack a system: chown, bypass file permissions, own any
# file, make device nodes (capability bits of /proc/self/status's CapEff).
BOOTSTRAP_CAPABILITIES = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_MKNOD": 27}


def can_bootstrap(status: str) -> bool:
    """Whether a process whose /proc/PID/status is ``status`` can bootstrap a base: root (its
    effective uid 0) with BOOTSTRAP_CAPABILITIES in its effective set."""
    uid = re.search(r"^Uid:\s+\d+\s+(\d+)", status, re.M)
    caps = re.search(r"^CapEff:\s+([0-9a-f]+)", status, re.M)
    if uid is None or caps is None or uid.group(1) != "0":
        return False
    effective = int(caps.group(1), 16)
    return all(effective >> bit & 1 for bit in BOOTSTRAP_CAPABILITIES.values())


def _own_status() -> str:
    try:
        return Path("/proc/self/status").read_text()
    except OSError:
        return ""


def ensure_base(target: BoardTarget, say: Progress) -> None:
    """``target``'s base in the local engine: bootstrapped here when missing (a minute or a
    few, once), for what builds FROM it outside a recipe's build (farm servers, card tools)."""
    if engine.image_labels(target.base_image) is not None:
        return
    if not can_bootstrap(_own_status()):  # export-img runs without privileges
        raise UsageError(
            f"The base {target.base_image} is not on this machine, and making it (mmdebstrap, "
            "once) needs root's privileges, which this command runs without",
            fix=f"Run `dockerarch base bootstrap --target {target.name}` once as root (or with "
            "sudo); then run this command again, privileges or not.",
        )
    say(f"no base {target.base_image} yet: bootstrapping it (a few minutes, once)")
    bootstrap(make_request(target), progress=say)


def make_image_import(
    target: BoardTarget, image: Path, *, partition: int | None = None, tag: str | None = None,
    progress: Progress = lambda line: None,
) -> ImageImport:  # fmt: skip
    if not image.is_file():
        raise UsageError(f"{image} does not exist or is not a file", fix="Check the path.")
    if partition is not None and partition < 0:
        raise UsageError(
            f"--partition {partition} is not a partition number", fix="Partitions count from 1."
        )
    if tag is not None and not _TAG.match(tag):
        raise UsageError(
            f"--tag {tag!r} is not an image reference", fix="For example: myboard/base:v3.0."
        )
    name = target.base_image.split("@", 1)[0].rsplit(":", 1)[0]
    progress(f"hashing {image.name} ({image.stat().st_size / 1e9:.2f} GB)")
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    return ImageImport(
        target=target, image=image, image_sha256=sha256_file(image), partition=partition,
        tag=tag or f"{name}:{target.suite}", epoch=int(epoch) if epoch.isdigit() else None,
    )  # fmt: skip


def import_image(
    request: ImageImport,
    *,
    refresh: bool = False,
    push_to: str | None = None,
    progress: Progress = lambda line: None,
) -> BaseResult:
    started = time.monotonic()
    cached = _cached_result(request.tag, request.inputs_hash(), refresh=refresh, push_to=push_to,
                            started=started)  # fmt: skip
    if cached is not None:
        return cached
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sdcard-", dir=STATE_DIR) as tmp:
        work = Path(tmp)
        context = work / context_name("context", work)
        context.mkdir()
        with sdcard.raw_image(request.image, work, progress) as raw:
            parts = sdcard.partitions(raw, request.image)
            root = sdcard.root_partition(parts, request.image, request.partition)
            progress(
                f"root filesystem: partition {root.number} ({root.fstype}, {root.size / 1e9:.2f} GB)"
            )
            sdcard.archive_partition(raw, root, context / "rootfs.tar", request.image)
        facts = sdcard.inspect_rootfs(context / "rootfs.tar", request.image)
        if facts.arch != request.target.arch.name:
            raise UsageError(
                f"The userland in {request.image} is {facts.arch or facts.machine} "
                f"({facts.evidence}), but target '{request.target.name}' is "
                f"{request.target.arch.name}",
                fix="Import it for a target of its arch (dockerarch targets ls).",
            )
        progress(f"userland: {facts.pretty_name}, {facts.arch}")
        # The times the card and the builds clamp to: SOURCE_DATE_EPOCH when set, else the
        # newest file time in the image (the same image, the same epoch; nothing of the
        # vendor's files is made older by the clamp)
        chosen = request.epoch if request.epoch is not None else facts.newest or None
        if request.epoch is None and chosen is not None:
            progress(f"SOURCE_DATE_EPOCH {chosen}: the newest file time in the image")
        labels = {
            f"{LABEL_PREFIX}.inputs": request.inputs_hash(),
            f"{LABEL_PREFIX}.target": request.target.name,
            f"{LABEL_PREFIX}.source": f"{request.image.name} sha256:{request.image_sha256}",
            f"{LABEL_PREFIX}.os": facts.pretty_name,
            f"{LABEL_PREFIX}.partition": str(root.number),
            f"{LABEL_PREFIX}.source-date-epoch": str(chosen) if chosen is not None else "",
        }
        return _import(
            context, tag=request.tag, platform=request.target.platform, labels=labels,
            epoch=chosen, push_to=push_to,
            started=started, note=f"{facts.pretty_name} from partition {root.number}",
        )  # fmt: skip


def release_epoch(request: BaseRequest) -> int | None:
    """The Date of the suite's Release file as seconds since the epoch: the default
    SOURCE_DATE_EPOCH, so that two bootstraps from the same archive state give the same image.
    None when the Release file cannot be read."""
    import email.utils
    import urllib.request

    uri = (request.snapshot or request.mirror).rstrip("/")
    for name in ("InRelease", "Release"):
        try:
            with urllib.request.urlopen(
                f"{uri}/dists/{request.suite}/{name}", timeout=30
            ) as answer:
                head = answer.read(4096).decode("utf-8", "replace")
        except (OSError, ValueError):
            continue
        found = re.search(r"^Date: (.+)$", head, re.MULTILINE)
        if found:
            try:
                return int(email.utils.parsedate_to_datetime(found.group(1).strip()).timestamp())
            except (TypeError, ValueError):
                return None
    return None


# The hooks' lines (which hook, which mode of our script) in words; None: the script says it.
_HOOK_WORDS: dict[tuple[str, str], str | None] = {
    ("--essential-hook", "hold"): "CA store: held until the end (made once, natively)",
    ("--customize-hook", "run"): "CA store: made natively",
    ("--extract-hook", "link"): None,
    ("--essential-hook", "link"): None,  # again, for the remaining packages
    ("--customize-hook", "unlink"): None,
}
_HOOK_LINE = re.compile(r"I: running (--\w+-hook) in shell: .*/native-[\w-]+'? (\w+) ")
# mmdebstrap's merged-/usr hooks (MERGED_USR_HOOKS), which it runs directly.
_MERGED_USR_LINE = re.compile(r"I: running (--\w+-hook) directly: .*/maybe-merged-usr/")
_MERGED_USR_WORDS = {
    "--setup-hook": "merged /usr: the links /bin, /lib, /sbin -> usr/ (as debootstrap makes them)",
    "--essential-hook": "merged /usr: usr-is-merged installed (no usrmerge conversion)",
}
# What our hook scripts say begins with their names.
_HOOK_SAYS = ("native-dpkg-helpers: ", "native-ca-certificates: ")


def _mmdebstrap_line(line: str, progress: Progress) -> None:
    """mmdebstrap's own messages (I:, W:, E:) and our hooks', said in words."""
    if line.startswith(_HOOK_SAYS):
        progress(line)
    elif not line.startswith(("I:", "W:", "E:")):
        return
    elif merged := _MERGED_USR_LINE.match(line):
        progress(_MERGED_USR_WORDS.get(merged.group(1), line))
    elif (hook := _HOOK_LINE.match(line)) is None:
        progress(line)
    elif (words := _HOOK_WORDS.get((hook.group(1), hook.group(2)), line)) is not None:
        progress(words)


# apt's words for lists that do not match the Release file that names them.
_OUT_OF_STEP = re.compile(
    r"^E: Failed to fetch (\S+)\s+(File has unexpected size \(\d+ != \d+\)|Hash Sum mismatch)"
)


def mirror_out_of_step(output: str) -> str | None:
    """apt's own line, shortened, when a bootstrap failed on a mirror whose package lists are
    out of step with its Release file (a sync in progress, or a stale cache in front of it)."""
    for line in output.splitlines():
        if found := _OUT_OF_STEP.match(line.strip()):
            return f"{found.group(1).rsplit('/dists/', 1)[-1]}: {found.group(2)}"
    return None


def _own_mount_namespace() -> list[str]:
    """The prefix that runs mmdebstrap in a mount namespace of its own, so that what it and the
    hooks mount in the chroot (native-dpkg-helpers' native shell) is gone when it ends, however
    it ends; nothing where this process may not mount (no CAP_SYS_ADMIN: in a container), where
    the hooks' mount fails too and they say the scripts run in the emulated shell."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return []
    found = re.search(r"^CapEff:\s*([0-9a-f]+)$", status, re.MULTILINE)
    cap_sys_admin = 21
    if found is None or not (int(found.group(1), 16) >> cap_sys_admin) & 1:
        return []
    return ["unshare", "--mount", "--propagation", "private", "--"]


def _mmdebstrap(request: BaseRequest, out: Path, epoch: int | None, progress: Progress) -> None:
    process.which(
        "mmdebstrap",
        hint="Install it: scripts/setup-host does (apt-get install mmdebstrap arch-test).",
    )
    if not MERGED_USR_HOOKS.is_dir():
        raise ConfigError(
            f"mmdebstrap's hooks {MERGED_USR_HOOKS} are missing, so no base can be made merged-/usr",
            fix="Install mmdebstrap 1.0 or newer: scripts/setup-host does (apt-get install "
            "mmdebstrap).",
        )
    args = [
        *_own_mount_namespace(),
        "mmdebstrap",
        "--variant=minbase",
        f"--architectures={request.target.debian_arch}",
        f"--include={','.join(request.include)}",
        "--mode=root",
        "--format=tar",
        # Without it, bookworm's init-system-helpers pulls in usrmerge, whose postinst converts
        # the tree with a perl script under QEMU and leaves perl in the base: armv7 72 s -> 65 s
        # alone, aarch64 198 -> 148 MB; the layout (links /bin /lib /sbin -> usr/...) is the same.
        f"--hook-dir={MERGED_USR_HOOKS}",
        # dpkg's helpers (dpkg-deb, dpkg-split, tar, rm) run natively in a foreign chroot; see
        # the script: the essential install finds them first on PATH (env below), apt's
        # through DPkg::Path. armv7 alone: 84 s -> 56 s.
        f'--extract-hook=sh {shlex.quote(str(HELPERS_HOOK))} link "$1"',
        f'--essential-hook=sh {shlex.quote(str(HELPERS_HOOK))} link "$1"',
        f'--customize-hook=sh {shlex.quote(str(HELPERS_HOOK))} unlink "$1"',
        # The CA store is made once, natively, when everything is installed (not twice under
        # QEMU: about 56 s of an armv7 bootstrap); see the script.
        f'--essential-hook=sh {shlex.quote(str(CA_HOOK))} hold "$1"',
        f'--customize-hook=sh {shlex.quote(str(CA_HOOK))} run "$1"',
    ]
    if request.keyring:
        args.append(f"--keyring={request.keyring}")
    args += [request.suite, str(out), request.snapshot or request.mirror]
    env = {"PATH": f"{HELPERS_BIN}:{os.environ.get('PATH', os.defpath)}"}
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(epoch)
    try:
        process.stream(
            args,
            env=env,
            on_line=lambda line: _mmdebstrap_line(line, progress),
            hint="Install it: scripts/setup-host does.",
        )
    except CommandFailedError as exc:
        if (said := mirror_out_of_step(exc.output)) is None:
            raise
        raise CommandFailedError(
            f"The mirror {request.snapshot or request.mirror} serves {request.suite}'s "
            f"{request.target.debian_arch} package lists out of step with its Release file "
            f"(apt: {said}), as a mirror does while it syncs, so no base was made",
            fix=f"Run the command again later. If it persists, name another mirror for the "
            f"target in targets.yaml ({request.target.name}: {{mirror: URL}}), or the suite's other "
            f"name on this mirror ({request.target.name}: {{suite: stable}} where stable is "
            f"{request.suite}).",
            returncode=exc.returncode,
            output=exc.output,
        ) from exc
    if not out.is_file() or out.stat().st_size == 0:
        raise ConfigError(f"mmdebstrap produced no root filesystem at {out}")
