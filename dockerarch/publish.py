"""`dockerarch push`: what `build` made, published for boards to pull, or archived for boards
that reach no registry.

Publishing is atomic and verified, children first and the index last (as oras-py and
go-containerregistry do): each target's runtime image is pushed by the engine (`docker push`,
credentials from docker's own store) under its per-target tag, and confirmed present in the
registry by the digest docker reported. Only then is one index written, listing every child by
digest with its platform, under the version tag and every extra tag; it is read back and its
digest and platform list compared with what was sent. A push cut short before that leaves the
previous index under the tag as it was. Each result's manifest.json records what was pushed.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockerarch import engine, oci, registry
from dockerarch.config import RegistryConfig
from dockerarch.errors import UsageError
from dockerarch.files import sha256_file, write_atomic
from dockerarch.render import RenderRequest
from dockerarch.sets.wanted import SetRequest
from dockerarch.targets import BoardTarget

Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Built:
    """One target's verified build result and the runtime image it left in the engine."""

    target: BoardTarget
    directory: Path
    name: str  # the distribution's name (the recipe's, or --package's)
    version: str
    image_tag: str
    image_id: str

    @property
    def per_target_tag(self) -> str:
        return _tag(f"{self.version}-{self.target.name}")


def _tag(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:128]


def repository_name(name: str) -> str:
    """The repository a distribution is pushed to (below the registry's namespace)."""
    return re.sub(r"[^a-z0-9_.-]", "-", name.lower())


def userland_image(board: BoardTarget, *, recipe: str | None, image: str | None,
                   version: str | None, package: str | None, out: Path,
                   wanted: SetRequest | None = None) -> str:  # fmt: skip
    """The image a root filesystem or card is made from: RECIPE's verified build result in
    ``out`` for ``board``, the set ``wanted`` (build wheel -r) installed and checked, or a local
    ``image`` of the board's platform."""
    if wanted is not None:
        return set_image(board, recipe or "wheel", wanted, out)
    if recipe is not None:
        from dockerarch.render import plan

        requests = plan(recipe, arch=None, target=board.name, version=version, package=package,
                        settings={})  # fmt: skip
        return find_built(requests, out, verb="export")[0].image_tag
    assert image is not None
    if engine.image_labels(image) is None:
        raise UsageError(f"There is no local image {image}", fix="docker pull or build it first.")
    platform = engine.image_platform(image)
    if platform.split("/")[:2] != board.platform.split("/")[:2]:
        raise UsageError(f"{image} is a {platform} image, not {board.platform} ({board.name})",
                         fix="Give an image of the target's platform.")  # fmt: skip
    return image


def set_image(board: BoardTarget, recipe: str, wanted: SetRequest, out: Path) -> str:
    """The image ``build wheel -r`` installed ``board``'s set into and checked (its manifest's
    ``image``), while the engine's tag still names that image and the files ask what the set
    was made from."""
    from dockerarch.sets.wanted import set_requests, sets_of

    requests = set_requests(recipe, wanted, arch=None, target=board.name, settings={})
    [(target, directory)] = sets_of(requests, wanted, out)
    files = " ".join(f"-r {f}" for f in wanted.requirement_files)
    rebuild = (f"dockerarch build wheel {files}{f' --name {wanted.name}' if wanted.name else ''} "
               f"--target {target.name} --out {out}")  # fmt: skip
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"There is no set {wanted.set_name} for {target.name} in {out} "
                         f"({directory / 'manifest.json'} is missing or unreadable)",
                         fix=f"Build it first: {rebuild}") from None  # fmt: skip
    record = manifest.get("image")
    if not isinstance(record, dict) or not record.get("tag") or not record.get("id"):
        raise UsageError(f"The set {directory} records no image it was installed into (made by "
                         "an older dockerarch, or with --no-smoke)",
                         fix=f"Build it again: {rebuild}")  # fmt: skip
    tag, image_id = str(record["tag"]), str(record["id"])
    if record.get("engine"):
        raise UsageError(f"The set's image {tag} is on the builder node {record['engine']}, "
                         "not in this machine's engine",
                         fix=f"Build the set here (--builder qemu): {rebuild}")  # fmt: skip
    local = engine.image_labels(tag)
    if local is None or local[0] != image_id:
        now = "is not in the engine" if local is None else f"is now image {local[0][:19]}"
        raise UsageError(f"The set's image {tag} {now}, not the {image_id[:19]} that "
                         f"{directory / 'manifest.json'} records", fix=f"Build it again: {rebuild}")  # fmt: skip
    return tag


def find_built(requests: list[RenderRequest], out: Path, verb: str = "push") -> list[Built]:
    """Each request's build result in ``out``, checked against the engine's images (``verb``:
    what the caller does with them, for the fix it names)."""
    check_platforms(requests)
    found = []
    for request in requests:
        target = request.target
        directory, data, rebuild = read_result(request, out)
        tag, image_id = require_checked(directory, data, rebuild)
        local = engine.image_labels(tag)
        if local is None:
            raise UsageError(
                f"The runtime image {tag} that {directory} records is not in the engine",
                fix=f"Build it first: {rebuild}"
                + ": the engine lost it (pruned, or another machine built it).",
            )
        if local[0] != image_id:
            raise UsageError(
                f"{tag} is now image {local[0][:19]}, not the {image_id[:19]} that "
                f"{directory / 'manifest.json'} records (rebuilt since, or the result is older)",
                fix=f"Build it first: {rebuild}"
                + f", then {verb} again: what leaves this machine must be what was verified.",
            )
        platform = engine.image_platform(tag)
        if platform.split("/")[:2] != target.platform.split("/")[:2]:
            raise UsageError(
                f"{tag} is a {platform} image, but {target.name} is {target.platform}",
                fix=f"Build it first: {rebuild}" + ".",
            )
        dist = request.result_name.rsplit("-", 1)[0]
        found.append(Built(target=target, directory=directory, name=dist,
                           version=request.version, image_tag=tag, image_id=image_id))  # fmt: skip
    return found


def read_result(request: RenderRequest, out: Path) -> tuple[Path, dict[str, Any], str]:
    """A build result's directory in ``out``, its manifest.json, and the command that makes it
    again (for messages); a result that is missing or unreadable is a UsageError saying so."""
    target = request.target
    directory = out / target.name / request.result_name
    spec = request.package and (request.package.local or request.package.spec)
    package = f" --package {shlex.quote(str(spec))}" if spec else ""
    tree = " --source DIR" if request.recipe.needs_source else ""
    rebuild = f"dockerarch build {request.recipe.name}{package}{tree} --target {target.name}" + (
        f" --out {out}" if out != Path("dist") else ""
    )
    try:
        data = json.loads((directory / "manifest.json").read_text())
    except FileNotFoundError:
        raise UsageError(f"Nothing built for {target.name} in {directory}",
                         fix=f"Build it first: {rebuild}.") from None  # fmt: skip
    except (OSError, ValueError) as exc:
        raise UsageError(f"Cannot read {directory / 'manifest.json'}: {exc}",
                         fix=f"Build it again: {rebuild}.") from exc  # fmt: skip
    return directory, data, rebuild


def require_checked(directory: Path, data: dict[str, Any], rebuild: str) -> tuple[str, str]:
    """The runtime image (tag, id) a result records: the image its artifacts were installed
    into on the target, where their shared libraries were checked and the board's apt packages
    found (needs_apt). A result built with --no-smoke has none, and nothing of it is published:
    not its image (push), not its wheels (upload, which would tell boards no apt package is
    needed without having looked)."""
    image = data.get("image") or {}
    tag, image_id = image.get("tag"), image.get("id")
    if not tag or not image_id:
        raise UsageError(
            f"The build in {directory} was never installed on its target (built with "
            "--no-smoke): it has no runtime image, and which apt packages its libraries need on "
            "a board is unknown",
            fix=f"Build it first: {rebuild} (without --no-smoke); push and upload publish only "
            "what was checked on the target.",
        )
    return str(tag), str(image_id)


def check_platforms(requests: list[RenderRequest]) -> None:
    """One index holds one image per platform: a board picks by platform alone."""
    seen: dict[str, str] = {}
    for request in requests:
        target = request.target
        other = seen.setdefault(target.platform, target.name)
        if other != target.name:
            raise UsageError(
                f"{other} and {target.name} are both {target.platform}: one index cannot hold "
                "two images of one platform (a board would get either)",
                fix=f"Push them one at a time, each with its own index tag: --target {other}, "
                f"then --target {target.name} --index-tag {request.version}-{target.name}.",
            )


def _platform(platform: str) -> dict[str, str]:
    parts = platform.split("/")
    out = {"architecture": parts[1], "os": parts[0]}
    if len(parts) > 2:
        out["variant"] = parts[2]
    return out


def make_index(children: list[tuple[registry.Descriptor, str]]) -> tuple[bytes, str]:
    """An index (a docker manifest list when every child is a docker manifest, else an OCI
    index) listing each child by digest with its platform; its bytes and media type."""
    media_type = (
        registry.DOCKER_LIST
        if all(d.media_type == registry.DOCKER_MANIFEST for d, _ in children)
        else registry.OCI_INDEX
    )
    index = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "manifests": [
            {
                "mediaType": d.media_type,
                "digest": d.digest,
                "size": d.size,
                "platform": _platform(platform),
            }
            for d, platform in children
        ],
    }
    return json.dumps(index, indent=2).encode() + b"\n", media_type


@dataclass(frozen=True, kw_only=True)
class Published:
    repository: str  # ADDRESS/NAMESPACE/NAME
    tags: tuple[str, ...]
    digest: str
    platforms: tuple[str, ...]


def push(
    built: list[Built],
    config: RegistryConfig,
    *,
    index_tag: str | None = None,
    extra_tags: tuple[str, ...] = (),
    say: Say,
    policy: registry.RetryPolicy = registry.RETRIES,
) -> Published:
    name, version = built[0].name, built[0].version
    path = f"{config.namespace}/{repository_name(name)}"
    repository = f"{config.address}/{path}"
    tags = tuple(dict.fromkeys([_tag(index_tag or version), *(_tag(t) for t in extra_tags)]))
    client = registry.RegistryClient(config, policy=policy, say=say)
    client.check_access(path)  # unreachable, untrusted or not logged in: said before any push
    previous = client.find(path, tags[0])

    children: list[tuple[registry.Descriptor, str]] = []
    child_digests: dict[str, str] = {}
    for b in built:
        remote = f"{repository}:{b.per_target_tag}"
        say(f"pushing {b.target.name} ({b.target.platform}) as {remote}")
        digest = _push_child(b.image_tag, remote, config, policy, say)
        found = client.find(path, digest)
        if found is None or found.digest not in ("", digest):
            raise registry.RegistryError(
                f"docker pushed {remote} as {digest}, but {config.address} does not have it",
                fix="Run the push again; if it persists, check the registry's storage and log.",
            )
        children.append((registry.Descriptor(media_type=found.media_type, digest=digest,
                                             size=found.size), b.target.platform))  # fmt: skip
        child_digests[b.target.name] = digest
        say(f"{b.target.name}: {digest} is in the registry")

    data, media_type = make_index(children)
    digest = registry.digest_of(data)
    for tag in tags:  # the tags move only now, every child being confirmed present by digest
        client.put_manifest(path, tag, data, media_type)
    back = client.manifest(path, tags[0])
    expected = [p for _, p in children]
    if back is None or back.digest != digest or back.platforms() != expected:
        raise registry.RegistryError(
            f"{repository}:{tags[0]} reads back as "
            f"{back.digest if back else 'nothing'} {back.platforms() if back else ''}, "
            f"not the index {digest} {expected} just written",
            fix="Another push to the same tag ran at the same time, or the registry rewrote it; "
            "push again.",
        )
    if previous is not None and previous.digest != digest:
        say(f"{repository}:{tags[0]} moved from {previous.digest} to {digest}")
    published = Published(repository=repository, tags=tags, digest=digest,
                          platforms=tuple(expected))  # fmt: skip
    for b in built:
        _record(b, {
            "registry": config.address,
            "image": f"{repository}:{b.per_target_tag}",
            "image_digest": child_digests[b.target.name],
            "index": [f"{repository}:{t}" for t in tags],
            "index_digest": digest,
            "platforms": list(expected),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })  # fmt: skip
    return published


def _push_child(local: str, remote: str, config: RegistryConfig, policy: registry.RetryPolicy,
                say: Say) -> str:  # fmt: skip
    def transient(exc: Exception) -> bool:
        return isinstance(exc, engine.PushFailed) and registry.transient_text(exc.text)

    try:
        return policy.run(f"pushing {remote}", lambda: engine.push_image(local, remote),
                          transient=transient, on_retry=say)  # fmt: skip
    except engine.PushFailed as exc:
        text = exc.text.lower()
        if "no basic auth credentials" in text or "unauthorized" in text or "denied" in text:
            raise registry.RegistryAuthError(
                f"{config.address} refused the push of {remote}: it needs credentials docker's "
                "store has not got (or refused them)",
                fix=registry.login_hint(config.address),
            ) from exc
        tries = policy.tries if transient(exc) else 1
        raise registry.RegistryError(
            f"Pushing {remote} to {config.address} failed after {tries} "
            f"{'try' if tries == 1 else 'tries'}: {exc.text[-300:] or exc.problem}",
            fix="Check the registry answers (dockerarch doctor), then push again: layers already "
            "sent are not sent twice, and the index tag has not moved.",
        ) from exc


def _record(b: Built, pushed: dict[str, Any]) -> None:
    path = b.directory / "manifest.json"
    data = json.loads(path.read_text())
    data["pushed"] = pushed
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


def board_lines(published: Published, config: RegistryConfig) -> list[str]:
    """What a board runs to pull what was published, and what its dockerd needs first."""
    ref = f"{published.repository}:{published.tags[0]}"
    if set(published.platforms) == {"linux/amd64"}:  # a tool for x86 machines (glow)
        return [f"on another x86-64 machine:  docker pull {ref}"]
    lines = [f"on a board:  docker pull {ref}"]
    if config.loopback:
        lines.append(
            f"note: {config.address} is this machine's loopback, which no board reaches: run the "
            "registry on an address boards reach (DOCKERARCH_REGISTRY_ADDR=0.0.0.0:5000 "
            "scripts/setup-host) and set registry.address to this machine's name or LAN address"
        )
    if config.insecure and not config.loopback:
        lines.append(
            f"{config.address} speaks plain HTTP: the board's dockerd must allow it first, in "
            f'/etc/docker/daemon.json: {{"insecure-registries": ["{config.address}"]}} '
            "(then restart dockerd)"
        )
    if config.ca is not None:
        lines.append(
            f"the board's dockerd must trust the registry's CA: copy {config.ca} to "
            f"/etc/docker/certs.d/{config.address}/ca.crt on the board"
        )
    return lines


# --- archives for boards that reach no registry ----------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Archived:
    path: Path
    sha256: str
    what: str  # "docker load" or "OCI layout"


def _land(tmp: Path, final: Path, what: str) -> Archived:
    sha = sha256_file(tmp)
    tmp.chmod(0o644)  # docker save writes 0600; an archive is for copying to boards
    tmp.replace(final)
    write_atomic(final.with_name(final.name + ".sha256"), f"{sha}  {final.name}\n".encode())
    return Archived(path=final, sha256=sha, what=what)


def archive(built: list[Built], dest: Path, *, say: Say) -> list[Archived]:
    """Per target a `docker load`-able archive of its runtime image, and one OCI layout (as a
    tar) of the whole index; each with a .sha256 beside it. Written to temporary names first."""
    if not dest.is_dir():
        raise UsageError(f"--archive {dest} is not a directory", fix="Create it first.")
    written = []
    saved: list[tuple[Built, Path]] = []
    name, version = built[0].name, built[0].version
    with tempfile.TemporaryDirectory(prefix=".dockerarch-archive-", dir=dest) as work:
        for b in built:
            final = dest / f"{repository_name(name)}-{b.per_target_tag}.docker.tar"
            tmp = Path(work) / final.name
            say(f"saving {b.image_tag} for {b.target.name}")
            engine.save_image(b.image_tag, tmp)
            saved.append((b, tmp))
        layout_final = dest / f"{repository_name(name)}-{_tag(version)}.oci.tar"
        layout_tmp = Path(work) / layout_final.name
        _oci_layout(saved, layout_tmp, ref=_tag(version))
        for _, tmp in saved:
            written.append(_land(tmp, dest / tmp.name, "docker load"))
        written.append(_land(layout_tmp, layout_final, "OCI layout"))
    return written


def _oci_layout(saved: list[tuple[Built, Path]], out: Path, *, ref: str) -> None:
    """Merge single-image saves (Docker >= 25 writes them as OCI layouts) into one layout whose
    index.json names one image index with every target's manifest and platform."""
    children = []
    seen: set[str] = set()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as layout:
        for b, path in saved:
            with oci.open_saved(path, b.image_tag) as single:
                child = single.descriptor()
                children.append({"mediaType": child["mediaType"], "digest": child["digest"],
                                 "size": child["size"], "platform": _platform(b.target.platform)})  # fmt: skip
                for member, handle in single.blobs():
                    if member.name in seen:  # layers the targets share (a base) are kept once
                        continue
                    seen.add(member.name)
                    layout.addfile(member, handle)
        image_index = json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_INDEX,
                                  "manifests": children}, indent=2).encode()  # fmt: skip
        index_digest = registry.digest_of(image_index)
        _add_bytes(layout, oci.blob_name(index_digest), image_index)
        top = {"schemaVersion": 2, "mediaType": registry.OCI_INDEX, "manifests": [{
            "mediaType": registry.OCI_INDEX, "digest": index_digest, "size": len(image_index),
            "annotations": {"org.opencontainers.image.ref.name": ref}}]}  # fmt: skip
        _add_bytes(layout, "index.json", json.dumps(top, indent=2).encode())
        _add_bytes(layout, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
