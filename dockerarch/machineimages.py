"""This machine's own images: the toolchain images, their native Python images (the toolchain
image's lower layers, an image of their own) and the runtime bases that builds make once and
share (buildsteps.images), about 0.6 GB, 0.2 GB (mostly the amd64 base, shared) and 0.2 GB each.

Each is keyed by what it is made from, so a new dockerarch, a re-bootstrapped base or another
package list makes a new one and the old one stays; several keys of one toolchain also live side
by side (a recipe with other native drivers). Which are still wanted only use can tell: every
build that takes or makes one records the time in ``machine-images.json`` in the state
directory, and ``dockerarch prune`` removes those no build has used for a while (an image made
before the record was kept counts as used when it was last tagged). ``dockerarch doctor`` says
what they hold.

A team shares them through its registry (registry.yaml's ``machine_images``): a build pulls the
image by its key before making it (taken only when its key label and platform are the ones asked
for), and with ``push`` pushes what it made. Whoever may push to the registry may give every
machine its compilers: the same trust as the images boards pull from it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dockerarch import base, engine
from dockerarch.config import RegistryConfig
from dockerarch.errors import EngineError, OutputError
from dockerarch.files import write_atomic

REPOSITORIES = ("dockerarch/toolchain", "dockerarch/native-python", "dockerarch/runtime-base")
KEY_LABEL = "org.dockerarch.machine-image.key"  # the sha256 of what the image is made from
RECORD = "machine-images.json"  # {tag: unix time of the last build that used it}
DEFAULT_UNUSED_DAYS = 14
KINDS = {"dockerarch/toolchain": "toolchain image", "dockerarch/native-python": "native Python image",
         "dockerarch/runtime-base": "runtime base"}  # fmt: skip
_LOCK = threading.Lock()  # a set's members record from threads of one process


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[Path]:
    """The record's path, held against other threads and other dockerarch processes."""
    record = state / RECORD
    with _LOCK, open(state / f".{RECORD}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield record


def _read(record: Path) -> dict[str, float]:
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):  # none yet, or unreadable: every image counts as never used
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def _write(record: Path, used: dict[str, float]) -> None:
    write_atomic(record, (json.dumps(used, indent=1, sort_keys=True) + "\n").encode())


def record_use(tag: str, *, now: float | None = None, state: Path | None = None) -> bool:
    """Note that a build used ``tag`` now. False when the state directory cannot be written (a
    user without rights there): the build goes on, the image only looks older to prune."""
    state = state or base.STATE_DIR
    try:
        state.mkdir(parents=True, exist_ok=True)
        with _locked(state) as record:
            used = _read(record)
            used[tag] = time.time() if now is None else now
            _write(record, used)
    except (OSError, OutputError):
        return False
    return True


@dataclass(frozen=True, kw_only=True)
class MachineImage:
    tag: str
    id: str
    size: int
    last_used: float  # unix time: the last build's record, else when it was tagged

    @property
    def kind(self) -> str:
        return KINDS.get(self.tag.partition(":")[0], "runtime base")

    def days_unused(self, now: float) -> float:
        return max(0.0, (now - self.last_used) / 86400)


def listing(*, state: Path | None = None) -> list[MachineImage]:
    """This machine's toolchain images, native Python images and runtime bases, least recently
    used first."""
    used = _read((state or base.STATE_DIR) / RECORD)
    found = [
        MachineImage(tag=i.tag, id=i.id, size=i.size, last_used=used.get(i.tag, i.tagged))
        for i in engine.images_named(REPOSITORIES)
    ]
    return sorted(found, key=lambda m: (m.last_used, m.tag))


def unused(images: list[MachineImage], days: float, now: float) -> list[MachineImage]:
    """Those no build has used for ``days`` days or more."""
    return [m for m in images if m.days_unused(now) >= days]


@dataclass(frozen=True, kw_only=True)
class Pruned:
    removed: list[MachineImage]
    kept: list[tuple[MachineImage, str]]  # and why: the engine refused (a container uses it)

    @property
    def freed(self) -> int:
        """Bytes: an image's layers shared with another image are freed with the last one only,
        so this is at most what the disk gets back."""
        return sum(m.size for m in self.removed)


def prune(days: float, *, dry_run: bool = False, now: float | None = None,
          state: Path | None = None) -> Pruned:  # fmt: skip
    """Remove the machine images no build has used for ``days`` days (their tags; the layers go
    with the last tag). One the engine refuses to remove is kept and said."""
    now = time.time() if now is None else now
    chosen = unused(listing(state=state), days, now)
    if dry_run:
        return Pruned(removed=chosen, kept=[])
    removed: list[MachineImage] = []
    kept: list[tuple[MachineImage, str]] = []
    for image in chosen:
        try:
            engine.remove_image(image.tag)
        except EngineError as exc:
            kept.append((image, exc.problem))
        else:
            removed.append(image)
    if removed:
        _forget([m.tag for m in removed], state or base.STATE_DIR)
    return Pruned(removed=removed, kept=kept)


def _forget(tags: list[str], state: Path) -> None:
    with contextlib.suppress(OSError), _locked(state) as record:
        used = _read(record)
        if any(tag in used for tag in tags):
            for tag in tags:
                used.pop(tag, None)
            _write(record, used)


def gigabytes(size: int) -> str:
    return f"{size / 1e9:.1f} GB"


def summary(images: list[MachineImage], days: float, now: float) -> str:
    """One line for doctor: how many, how big, how many unused."""
    if not images:
        return "none yet (hybrid builds make a toolchain image and a runtime base once)"
    counted = [(sum(m.kind == kind for m in images), kind) for kind in KINDS.values()]
    line = ", ".join(f"{n} {kind}{'s' * (n != 1)}" for n, kind in counted if n)
    line += f": {gigabytes(sum(m.size for m in images))}"
    old = unused(images, days, now)
    if old:
        line += (f"; {len(old)} unused for {days:g}+ days ({gigabytes(sum(m.size for m in old))}):"
                 " dockerarch prune removes them")  # fmt: skip
    return line


@dataclass(frozen=True)
class Sharing:
    """Machine images through the team's registry: pulled by key, and pushed once made when
    ``push`` (a trusted machine; "pull" is the read-only mode for untrusted runners)."""

    registry: RegistryConfig
    push: bool = False

    @property
    def prefix(self) -> str:
        """ADDRESS/NAMESPACE"""
        return f"{self.registry.address}/{self.registry.namespace}"

    def remote(self, tag: str) -> str:
        """Where the machine image ``tag`` (dockerarch/toolchain:...) lives in the registry."""
        return f"{self.prefix}/{tag.removeprefix('dockerarch/')}"

    def repository(self, tag: str) -> tuple[str, str]:
        """The registry's repository of the machine image ``tag`` and its tag there."""
        name, _, version = tag.removeprefix("dockerarch/").partition(":")
        return f"{self.registry.namespace}/{name}", version


def sharing(registry: RegistryConfig) -> Sharing | None:
    """registry.yaml's ``machine_images`` as a Sharing (None: off)."""
    if registry.machine_images == "off":
        return None
    return Sharing(registry, push=registry.machine_images == "push")


def same_platform(found: str, wanted: str) -> bool:
    """Whether an image's os/arch[/variant] is the --platform asked for (arm64's variant v8 is
    arm64's only one, and an image may name it or not)."""
    return found.removesuffix("/v8") == wanted.removesuffix("/v8")
