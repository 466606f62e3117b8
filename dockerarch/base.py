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
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dockerarch import engine, hostapt, process
from dockerarch.errors import ConfigError, UsageError
from dockerarch.targets import BoardTarget

LABEL_PREFIX = "org.dockerarch.base"
FORMAT = "1"  # bump when the way bases are made changes, to invalidate every cache
DEFAULT_INCLUDE = ("ca-certificates",)
STATE_DIR = Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch"))


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
        blob = json.dumps(self.inputs(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True, kw_only=True)
class BaseResult:
    tag: str
    image_id: str
    pushed: str | None
    cached: bool
    seconds: float


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


def cached_image(request: BaseRequest) -> str | None:
    """The id of an image tagged for ``request`` and made from the same inputs, if any."""
    image = engine.image_labels(request.tag)
    if image is None:
        return None
    image_id, labels = image
    return image_id if labels.get(f"{LABEL_PREFIX}.inputs") == request.inputs_hash() else None


def bootstrap(request: BaseRequest, *, refresh: bool = False, push_to: str | None = None) -> BaseResult:
    started = time.monotonic()
    if not refresh:
        image_id = cached_image(request)
        if image_id is not None:
            pushed = engine.push_copy(request.tag, push_to) if push_to else None
            return BaseResult(
                tag=request.tag, image_id=image_id, pushed=pushed, cached=True,
                seconds=time.monotonic() - started,
            )  # fmt: skip
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="base-", dir=STATE_DIR) as tmp:
        context = Path(tmp)
        rootfs = context / "rootfs.tar"
        _mmdebstrap(request, rootfs)
        (context / "Dockerfile").write_text(
            "# A root filesystem bootstrapped by dockerarch with mmdebstrap.\n"
            "FROM scratch\nADD rootfs.tar /\nCMD [\"/bin/bash\"]\n"
        )
        labels = {
            LABEL_PREFIX: "1",
            f"{LABEL_PREFIX}.inputs": request.inputs_hash(),
            f"{LABEL_PREFIX}.target": request.target.name,
            f"{LABEL_PREFIX}.source": f"{request.snapshot or request.mirror} {request.suite}",
            f"{LABEL_PREFIX}.include": ",".join(request.include),
        }
        image_id = engine.import_rootfs(
            context, platform=request.target.platform, tag=request.tag, labels=labels,
            source_date_epoch=request.source_date_epoch,
        )  # fmt: skip
    pushed = engine.push_copy(request.tag, push_to) if push_to else None
    return BaseResult(
        tag=request.tag, image_id=image_id, pushed=pushed, cached=False,
        seconds=time.monotonic() - started,
    )  # fmt: skip


def _mmdebstrap(request: BaseRequest, out: Path) -> None:
    process.which("mmdebstrap", hint="Install it: scripts/setup-host does (apt-get install mmdebstrap arch-test).")
    args = [
        "mmdebstrap",
        "--variant=minbase",
        f"--architectures={request.target.debian_arch}",
        f"--include={','.join(request.include)}",
        "--mode=root",
        "--format=tar",
    ]
    if request.keyring:
        args.append(f"--keyring={request.keyring}")
    args += [request.suite, str(out), request.snapshot or request.mirror]
    env = {}
    if request.source_date_epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(request.source_date_epoch)
    process.run(
        args,
        env=env,
        timeout=3600,
        hint="Install it: scripts/setup-host does.",
    )
    if not out.is_file() or out.stat().st_size == 0:
        raise ConfigError(f"mmdebstrap produced no root filesystem at {out}")
