"""`dockerarch upload`: verified wheels into a Python package index per board target, for boards
that install with pip (the static tree for boards that reach no index is indexarchive's).

The anchor is piwheels: one index per OS release (a linux_armv7l tag says nothing of glibc or
Python), static PEP 503 pages with sha256 fragments, pip's own hash checking. Every wheel passes
the board-ABI gate of its target's index at the door (machine, float ABI, tag, GLIBC/GLIBCXX,
Python version) and must still be the file the build verified (the sha256 in manifest.json).
An index never changes a published file: the same file again is a no-op (compared by sha256: the
page's, or the file's own bytes when the page lists none), a different file under a published
name is refused before anything is uploaded. Uploads speak the legacy upload API (indexclient),
so any index works: devpi, pypiserver, Nexus, GitLab. Credentials come from indexcreds; never
argv, output or results. manifest.json records each file as it lands, with where and its sha256.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from packaging.utils import canonicalize_name, parse_wheel_filename

from dockerarch import artifacts
from dockerarch.artifacts import VerificationError
from dockerarch.config import IndexConfig, url_host
from dockerarch.errors import UsageError
from dockerarch.files import sha256_file, write_atomic
from dockerarch.indexclient import Index, PackageIndexError
from dockerarch.indexcreds import credentials
from dockerarch.publish import read_result, require_checked
from dockerarch.render import RenderRequest
from dockerarch.targets import BoardTarget

Say = Callable[[str], None]
K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Wheel:
    """One verified wheel of a build result, for one target."""

    target: BoardTarget
    path: Path
    sha256: str
    result: Path  # the build's result directory (its manifest.json)
    needs_apt: tuple[str, ...] = ()  # the target's packages its shared libraries need
    fetched: bool = False  # a wheel set's member fetched from an index (manylinux tags pass)

    @property
    def project(self) -> str:
        return str(canonicalize_name(parse_wheel_filename(self.path.name)[0]))

    @property
    def version(self) -> str:
        return str(parse_wheel_filename(self.path.name)[1])


# --- what was built ----------------------------------------------------------------------------


def find_wheels(requests_: list[RenderRequest], out: Path) -> list[Wheel]:
    """Each request's verified wheels in ``out``, still the files the build verified."""
    wheels = []
    for request in requests_:
        target = request.target
        directory, manifest, rebuild = read_result(request, out)
        found = [a for a in manifest.get("artifacts", []) if a.get("kind") == "wheel"]
        if found:
            require_checked(directory, manifest, rebuild)
        if not found:
            kinds = sorted({str(a.get("kind")) for a in manifest.get("artifacts", [])})
            raise UsageError(
                f"The build of {request.result_name} for {target.name} made no wheel "
                f"({', '.join(kinds) or 'nothing'}): a package index serves wheels only",
                fix="Publish its runtime image instead: dockerarch push "
                f"{request.recipe.name} --target {target.name}.",
            )
        for artifact in found:
            path = directory / str(artifact["name"])
            if not path.is_file():
                raise UsageError(f"{path}, which {directory / 'manifest.json'} records, is gone",
                                 fix=f"Build it again: {rebuild}.")  # fmt: skip
            digest = sha256_file(path)
            if digest != artifact.get("sha256"):
                raise VerificationError(
                    f"{path} is not the file the build verified (sha256 {digest[:16]}..., "
                    f"manifest.json says {str(artifact.get('sha256'))[:16]}...)",
                    fix=f"What is published must be what was verified: build it again: {rebuild}.",
                )
            needs = tuple(str(p) for p in manifest.get("needs_apt") or ())
            wheels.append(Wheel(target=target, path=path, sha256=digest, result=directory,
                                needs_apt=needs))  # fmt: skip
    return wheels


def find_set_wheels(sets: list[tuple[BoardTarget, Path]]) -> list[Wheel]:
    """Every wheel of each target's set directory (build wheel -r), still the file the set's
    manifest.json records."""
    wheels = []
    for target, directory in sets:
        try:
            manifest = json.loads((directory / "manifest.json").read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"No wheel set for {target.name} at {directory} ({type(exc).__name__})",
                fix="Build it first: dockerarch build wheel -r FILE (with the same --out and "
                "--name).",
            ) from exc
        needs = tuple(str(p) for p in manifest.get("needs_apt") or ())
        for entry in manifest.get("distributions", []):
            if not entry.get("runtime"):
                continue
            path = directory / str(entry["file"])
            digest = sha256_file(path) if path.is_file() else "missing"
            if digest != entry.get("sha256"):
                raise VerificationError(
                    f"{path} is not the file the set recorded ({digest[:16]}, manifest.json "
                    f"says {str(entry.get('sha256'))[:16]})",
                    fix="What is published must be what was checked: build the set again.",
                )
            wheels.append(Wheel(target=target, path=path, sha256=digest, result=directory,
                                needs_apt=needs, fetched=entry.get("how") == "fetched"))  # fmt: skip
    return wheels


def gate(wheel: Wheel) -> None:
    """The board-ABI gate of the target's index: machine, float ABI, tag, GLIBC/GLIBCXX (the
    build's own verification, again) and the target's Python version."""
    artifacts.board_gate(wheel.path, wheel.target, fetched=wheel.fetched)


# --- uploading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    wheel: Wheel
    index: str  # the simple URL of the target's index
    url: str  # the file's URL as the index lists it
    uploaded: bool  # False: the index already held this very file


def upload(wheels: list[Wheel], config: IndexConfig, *, state_dir: Path,
           say: Say) -> list[Outcome]:  # fmt: skip
    """Publish each wheel to its target's index: every wheel passes the gate and every name is
    checked against the index before the first upload; each upload is read back and compared by
    sha256, and recorded in its result's manifest.json as soon as it is there (a failure later on
    leaves what landed recorded)."""
    for wheel in wheels:
        gate(wheel)
    indexes: dict[str, Index] = {}
    plan: list[tuple[Wheel, Index, str | None]] = []
    for wheel in wheels:
        index = indexes.get(wheel.target.name)
        if index is None:
            creds = credentials(config.upload_url(wheel.target.name), state_dir=state_dir)
            if creds.password and config.exposes_credentials and not config.insecure:
                raise PackageIndexError(
                    f"The index at {config.server} is plain HTTP on another machine: the "
                    f"credentials ({creds.source}) would cross the network in clear text, and "
                    "nothing was uploaded",
                    fix="Serve the index over https:// (with index.ca for your own CA), or, on a "
                    "network you trust, say so in registry.yaml: index: {insecure: true}.",
                )
            index = indexes[wheel.target.name] = Index(config, wheel.target.name, creds)
        there = index.published(wheel.project).get(wheel.path.name)
        digest = index.sha256_of(there) if there else None
        if there and digest != wheel.sha256:
            raise PackageIndexError(
                f"The index for {wheel.target.name} already has {wheel.path.name} with other "
                f"contents (sha256 {str(digest)[:16]}..., this build's {wheel.sha256[:16]}...); "
                "an index never changes a published file, and nothing was uploaded",
                fix="Publish a new version (or a build tag, as piwheels does), or remove the file "
                "from the index by hand if it was never installed anywhere.",
            )
        plan.append((wheel, index, there.url if there else None))
    outcomes = []
    for wheel, index, url in plan:
        if url is not None:
            say(f"{wheel.target.name}: {wheel.path.name} is already published, the same file "
                "(sha256 compared)")  # fmt: skip
            outcome = Outcome(wheel, index.simple_url, url, uploaded=False)
        else:
            index.ensure(say)
            say(f"{wheel.target.name}: uploading {wheel.path.name} to {index.upload_url} "
                f"(credentials: {index.creds.source})")  # fmt: skip
            index.upload(wheel.path, wheel.needs_apt)
            back = index.published(wheel.project).get(wheel.path.name)
            if back is None or index.sha256_of(back) != wheel.sha256:
                raise PackageIndexError(
                    f"After the upload, the index for {wheel.target.name} "
                    f"{'does not list' if back is None else 'lists another file as'} "
                    f"{wheel.path.name} at {index.simple_url}{wheel.project}/",
                    fix="Check that registry.yaml's index.simple is where index.url's uploads "
                    "appear.",
                )
            outcome = Outcome(wheel, index.simple_url, back.url, uploaded=True)
        record(outcome)
        outcomes.append(outcome)
    return outcomes


def record(outcome: Outcome) -> None:
    """One published file into its result's manifest.json ("published": one entry per index and
    file, the newest kept)."""
    path = outcome.wheel.result / "manifest.json"
    data = json.loads(path.read_text())
    entry = {"index": outcome.index, "file": outcome.wheel.path.name,
             "sha256": outcome.wheel.sha256, "url": outcome.url}  # fmt: skip
    earlier = [p for p in data.get("published", [])
               if (p.get("index"), p.get("file")) != (entry["index"], entry["file"])]  # fmt: skip
    data["published"] = [*earlier, entry]
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


def board_lines(outcomes: list[Outcome], config: IndexConfig,
                locks: dict[str, Path] | None = None) -> list[str]:  # fmt: skip
    """What a board runs: the pip install line per target (with a wheel set's lock file, -r
    and --require-hashes: everything from the index, nothing compiled), and the /etc/pip.conf
    lines."""
    lines = []
    host = url_host(config.simple)
    plain = config.simple.startswith("http://") and not config.simple_loopback
    for simple, group in group_by(outcomes, lambda o: o.index).items():
        target = group[0].wheel.target
        reqs = " ".join(sorted({f"{o.wheel.project}=={o.wheel.version}" for o in group}))
        trusted = f" --trusted-host {host}" if plain else ""
        lines.append(f"on a {target.name} board ({target.distro} {target.suite}, Python "
                     f"{target.python}):")  # fmt: skip
        needs = sorted({p for o in group for p in o.wheel.needs_apt})
        if needs:
            lines.append(f"  apt install {' '.join(needs)}   # shared libraries the wheels need")
        lock = (locks or {}).get(target.name)
        if lock is not None:
            lines.append(f"  copy {lock} to the board, then:")
            lines.append(f"  pip install --index-url {simple}{trusted} --only-binary :all: "
                         "--require-hashes -r requirements.txt")  # fmt: skip
        else:
            lines.append(f"  pip install --index-url {simple}{trusted} --only-binary :all: {reqs}")
        lines.append("  or for every pip install, in /etc/pip.conf (this index alone: pip never "
                     "takes one of these names from another index):")  # fmt: skip
        lines.append("    [global]")
        lines.append(f"    index-url = {simple}")
        if plain:
            lines.append(f"    trusted-host = {host}")
    lines.append(
        "note: never add this index as extra-index-url beside a public one: pip then takes each "
        "name from whichever index has the newest version, and a public package under one of "
        "these names would win (dependency confusion). Upload what the wheels need with them "
        "(a set, upload wheel -r FILE), and install a set with its hashed requirements.txt."
    )
    if config.simple_loopback:
        lines.append(
            f"note: {config.simple} is this machine's loopback, which no board reaches: run the "
            "index on an address boards reach (scripts/setup-host --index-addr 0.0.0.0:3141) and "
            "set registry.yaml's index.url and index.simple to this machine's name or address"
        )
    return lines


def group_by(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` by ``key``, in first-seen order."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups
