"""The only module that talks to the Docker engine and buildx (through python-on-whales).

python-on-whales is imported lazily: it pulls in pydantic, which alone costs a quarter of a
second, and ``dockerarch --help`` must not pay for it.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from dockerarch import process
from dockerarch.errors import EngineError

if TYPE_CHECKING:
    from python_on_whales import DockerClient

DEFAULT_SOCKET = "/var/run/docker.sock"
START_HINT = (
    "Start one with scripts/setup-host (it runs dockerd in the background), or point DOCKER_HOST "
    "at a running daemon."
)


@dataclass(frozen=True, kw_only=True)
class DaemonInfo:
    host: str
    version: str
    api_version: str


@dataclass(frozen=True, kw_only=True)
class BuilderInfo:
    name: str
    driver: str
    platforms: tuple[str, ...]


def docker_host() -> str:
    """Where the CLI will connect: DOCKER_HOST, or the default socket."""
    return os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"


def client() -> DockerClient:
    from python_on_whales import DockerClient

    binary = os.environ.get("DOCKERARCH_DOCKER")  # a docker CLI other than the one on PATH
    return DockerClient(client_binary=binary) if binary else DockerClient()


def _whales_error(exc: Exception) -> str:
    """The useful part of a python-on-whales DockerException: the command's stderr."""
    stderr = getattr(exc, "stderr", None)
    text = (stderr or str(exc)).strip()
    return " ".join(text.split())[:400]


def reachable(host: str, timeout: float = 3.0) -> str | None:
    """None when something accepts connections at ``host`` (unix:// or tcp://), else why not.

    A quick socket check before asking the CLI, which can hang for minutes on a blackholed
    tcp:// address. Other schemes (ssh://, npipe://) are left to the CLI.
    """
    url = urlparse(host)
    if url.scheme == "unix":
        path = url.path or DEFAULT_SOCKET
        if not os.path.exists(path):
            return f"the socket {path} does not exist"
        family, address = socket.AF_UNIX, path
    elif url.scheme == "tcp":
        if not url.hostname:
            return f"DOCKER_HOST={host} names no host"
        family, address = socket.AF_INET, (url.hostname, url.port or 2375)  # type: ignore[assignment]
    else:
        return None
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(address)
    except OSError as exc:
        return f"nothing answers at {host} ({exc.strerror or exc})"
    return None


def daemon_info() -> DaemonInfo:
    host = docker_host()
    why = reachable(host) if "DOCKER_CONTEXT" not in os.environ else None
    if why:
        raise EngineError(f"No Docker daemon answers: {why}", fix=START_HINT)
    from python_on_whales.exceptions import DockerException

    try:
        version = client().version()
    except DockerException as exc:
        raise EngineError(
            f"No Docker daemon answers at {host}: {_whales_error(exc)}", fix=START_HINT
        ) from exc
    if version.server is None:
        raise EngineError(f"No Docker daemon answers at {host}", fix=START_HINT)
    return DaemonInfo(
        host=host,
        version=str(version.server.version),
        api_version=str(version.server.api_version),
    )


def buildx_version() -> str:
    """buildx's own version number, e.g. "0.13.1"."""
    from python_on_whales.exceptions import DockerException

    try:
        text = client().buildx.version()
    except DockerException as exc:
        raise EngineError(
            f"docker buildx does not run: {_whales_error(exc)}",
            fix="Install the buildx plugin >= 0.12 (scripts/setup-host installs Debian's "
            "docker-buildx).",
        ) from exc
    found = re.search(r"\bv?(\d+\.\d+(?:\.\d+)?)", str(text))
    if not found:
        raise EngineError(f"Cannot read a version number from 'docker buildx version': {text!r}")
    return found.group(1)


def current_builder() -> BuilderInfo:
    from python_on_whales.exceptions import DockerException

    try:
        builder = client().buildx.inspect()
    except DockerException as exc:
        raise EngineError(
            f"'docker buildx inspect' failed: {_whales_error(exc)}",
            fix="Check the daemon answers, and 'docker buildx use default' to pick the engine's "
            "own builder.",
        ) from exc
    platforms: list[str] = []
    for node in builder.nodes or []:
        platforms += [p for p in node.platforms or [] if p not in platforms]
    return BuilderInfo(
        name=builder.name or "?", driver=builder.driver or "?", platforms=tuple(platforms)
    )


def docker_root_dir() -> str:
    from python_on_whales.exceptions import DockerException

    try:
        return str(client().info().docker_root_dir)
    except DockerException as exc:
        raise EngineError(f"'docker info' failed: {_whales_error(exc)}", fix=START_HINT) from exc


def image_labels(reference: str) -> tuple[str, dict[str, str]] | None:
    """(image id, labels) of a local image, or None when the engine has no such image."""
    from python_on_whales.exceptions import DockerException, NoSuchImage

    docker = client()
    try:
        image = docker.image.inspect(reference)
    except NoSuchImage:
        return None
    except DockerException as exc:
        raise EngineError(f"Cannot inspect image {reference}: {_whales_error(exc)}", fix=START_HINT) from exc
    return str(image.id), dict(image.config.labels or {})


def import_rootfs(
    context: Path,
    *,
    platform: str,
    tag: str,
    labels: dict[str, str],
    source_date_epoch: int | None,
) -> str:
    """Build ``context`` (a FROM scratch Dockerfile adding rootfs.tar) for ``platform`` and load
    it into the engine as ``tag``. With the docker driver, BuildKit resolves FROM in the local
    image store only when the platform matches, so the platform is set at build time rather
    than with `docker import` (which recorded amd64 on one engine)."""
    from python_on_whales.exceptions import DockerException

    build_args = {}
    if source_date_epoch is not None:
        build_args["SOURCE_DATE_EPOCH"] = str(source_date_epoch)
    try:
        image = client().buildx.build(
            context_path=context,
            platforms=[platform],
            tags=[tag],
            labels=labels,
            build_args=build_args,
            load=True,
            progress="plain" if process.debug_enabled() else False,
        )
    except DockerException as exc:
        raise EngineError(
            f"Importing the root filesystem as {tag} ({platform}) failed: {_whales_error(exc)}"
        ) from exc
    if image is None:
        raise EngineError(f"buildx loaded no image for {tag}")
    return str(image.id)


def push_copy(tag: str, registry: str) -> str:
    """Tag ``tag`` as REGISTRY/tag and push it; returns the pushed reference."""
    from python_on_whales.exceptions import DockerException

    remote = f"{registry}/{tag}"
    docker = client()
    try:
        docker.image.tag(tag, remote)
        docker.image.push(remote, quiet=True)
    except DockerException as exc:
        raise EngineError(
            f"Pushing {remote} failed: {_whales_error(exc)}",
            fix="Check the registry answers (dockerarch doctor).",
        ) from exc
    return remote


@dataclass(frozen=True, kw_only=True)
class LocalImage:
    id: str
    tags: tuple[str, ...]
    platform: str
    size: int
    created: str
    labels: dict[str, str]


def images_labelled(label: str) -> list[LocalImage]:
    """Local images carrying ``label``, newest first."""
    from python_on_whales.exceptions import DockerException

    try:
        images = client().image.list(filters={"label": label})
    except DockerException as exc:
        raise EngineError(f"Cannot list images: {_whales_error(exc)}", fix=START_HINT) from exc
    found = []
    for image in images:
        platform = "/".join(p for p in (image.os, image.architecture, image.variant) if p)
        found.append(
            LocalImage(
                id=str(image.id),
                tags=tuple(image.repo_tags or ()),
                platform=platform,
                size=int(image.size or 0),
                created=image.created.strftime("%Y-%m-%d %H:%M:%S") if image.created else "?",
                labels=dict(image.config.labels or {}),
            )
        )
    return sorted(found, key=lambda i: i.created, reverse=True)
