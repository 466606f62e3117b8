"""The only module that talks to the Docker engine and buildx (through python-on-whales).

python-on-whales is imported lazily: it pulls in pydantic, which alone costs a quarter of a
second, and ``dockerarch --help`` must not pay for it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import urlparse

from dockerarch import process
from dockerarch.errors import DockerarchError, EngineError

if TYPE_CHECKING:
    from python_on_whales import DockerClient

    from dockerarch.config import RegistryConfig
    from dockerarch.registry import RemoteImage

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


def client(context: str | None = None) -> DockerClient:
    """A client of the default engine, or of the docker context ``context`` (a native node)."""
    from python_on_whales import DockerClient

    kwargs: dict[str, str] = {}
    binary = os.environ.get("DOCKERARCH_DOCKER")  # a docker CLI other than the one on PATH
    if binary:
        kwargs["client_binary"] = binary
    if context:
        kwargs["context"] = context
    return DockerClient(**kwargs)  # type: ignore[arg-type]


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


def machine_info(context: str | None = None) -> dict[str, str]:
    """What the engine (of a docker context: a node) reports of its machine: architecture,
    kernel, engine version, OS; {"error": ...} when it cannot be asked."""
    from python_on_whales.exceptions import DockerException

    try:
        info = client(context).info()
    except DockerException as exc:
        return {"error": _whales_error(exc)[:200]}
    return {
        "architecture": str(info.architecture or ""), "kernel": str(info.kernel_version or ""),
        "engine": str(info.server_version or ""), "os": str(info.operating_system or ""),
    }  # fmt: skip


def current_builder(name: str | None = None) -> BuilderInfo:
    """The builder buildx uses (or the one named: a docker context is a builder of its name),
    and the platforms its BuildKit says it runs."""
    from python_on_whales.exceptions import DockerException

    try:
        builder = client().buildx.inspect(name, bootstrap=name is not None)
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


def build_cache_size() -> int | None:
    """Bytes BuildKit's cache of the default engine holds ('docker system df'), None when the
    engine does not say."""
    from python_on_whales.exceptions import DockerException

    try:
        size = client().system.disk_free().build_cache.size
    except (DockerException, ValueError, KeyError):
        return None
    return int(size) if size is not None else None


@dataclass(frozen=True, kw_only=True)
class CacheRecord:
    """One record of BuildKit's cache, as 'docker buildx du --verbose' lists it."""

    id: str
    description: str
    size: str  # as buildx prints it ("1.426GB")
    reclaimable: bool  # false while a build holds it
    kind: str = "regular"  # "Type": regular (a step's result), exec.cachemount, source.local, ...


def parse_cache_records(text: str) -> list[CacheRecord]:
    """The records of 'docker buildx du --verbose': blocks of "Key:<tabs>value" lines, one blank
    line between blocks (the API has them, but python-on-whales does not read them)."""
    records = []
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep and key and not key.startswith((" ", "\t")):
                fields.setdefault(key.strip(), value.strip())
        if re.fullmatch(r"[a-z0-9]{10,64}", fields.get("ID", "")):
            records.append(CacheRecord(id=fields["ID"], description=fields.get("Description", ""),
                                       size=fields.get("Size", ""),
                                       reclaimable=fields.get("Reclaimable", "true") == "true",
                                       kind=fields.get("Type", "regular")))  # fmt: skip
    return records


def cache_records() -> list[CacheRecord]:
    """Every record of the default builder's cache."""
    from python_on_whales.exceptions import DockerException
    from python_on_whales.utils import run

    try:
        text = run([*client().docker_cmd, "buildx", "du", "--verbose"])
    except DockerException as exc:
        raise EngineError(
            f"'docker buildx du' failed: {_whales_error(exc)}", fix=START_HINT
        ) from exc
    return parse_cache_records(str(text or ""))


def drop_cache_records(marker: str) -> list[CacheRecord]:
    """Remove from BuildKit's cache the records whose description holds ``marker`` (a build's
    one-off steps, which no later build can use); records a running build holds stay."""
    found = [r for r in cache_records() if r.reclaimable and marker in r.description]
    prune_cache_records([r.id for r in found])
    return found


def prune_cache_records(ids: list[str]) -> None:
    """Remove these records from BuildKit's cache (the engine's prune filter matches ids only:
    a description filter is refused)."""
    from python_on_whales.exceptions import DockerException

    if not ids:
        return
    pattern = "|".join(re.escape(i) for i in ids)
    try:
        client().buildx.prune(all=True, filters={"id": f"^({pattern})$"})
    except DockerException as exc:
        raise EngineError(f"'docker buildx prune' failed: {_whales_error(exc)}") from exc


def docker_root_dir() -> str:
    from python_on_whales.exceptions import DockerException

    try:
        return str(client().info().docker_root_dir)
    except DockerException as exc:
        raise EngineError(f"'docker info' failed: {_whales_error(exc)}", fix=START_HINT) from exc


def image_labels(reference: str, context: str | None = None) -> tuple[str, dict[str, str]] | None:
    """(image id, labels) of a local image, or None when the engine has no such image."""
    from python_on_whales.exceptions import DockerException, NoSuchImage

    docker = client(context)
    try:
        image = docker.image.inspect(reference)
    except NoSuchImage:
        return None
    except DockerException as exc:
        raise EngineError(
            f"Cannot inspect image {reference}: {_whales_error(exc)}", fix=START_HINT
        ) from exc
    return str(image.id), dict(image.config.labels or {})


def tag_image(reference: str, tag: str, context: str | None = None) -> None:
    """Give a local image another tag (docker tag)."""
    from python_on_whales.exceptions import DockerException

    try:
        client(context).image.tag(reference, tag)
    except DockerException as exc:
        raise EngineError(
            f"Cannot tag image {reference} as {tag}: {_whales_error(exc)}", fix=START_HINT
        ) from exc


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
    if image is None or isinstance(image, Iterator):
        raise EngineError(f"buildx loaded no image for {tag}")
    return str(image.id)


def push_copy(tag: str, registry: str) -> str:
    """Tag ``tag`` as REGISTRY/tag and push it; returns the pushed reference."""
    return push_as(tag, f"{registry}/{tag}")


def push_as(tag: str, remote: str) -> str:
    """Tag ``tag`` as ``remote`` (a registry's reference) and push it; returns ``remote``."""
    from python_on_whales.exceptions import DockerException

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


@dataclass(frozen=True)
class Pulled:
    """An image pulled from a registry: its labels and the platform it is for."""

    labels: dict[str, str]
    platform: str  # os/arch[/variant], as --platform writes it


def pull_image(reference: str, platform: str) -> Pulled | None:
    """``reference`` pulled for ``platform`` (docker pull: docker's own credentials), or None
    when the registry has no such image. A registry that does not answer or refuses is an
    EngineError."""
    from python_on_whales.exceptions import DockerException, NoSuchImage

    docker = client()
    try:
        docker.image.pull(reference, quiet=True, platform=platform)
        image = docker.image.inspect(reference)
    except NoSuchImage:
        return None
    except DockerException as exc:
        text = _whales_error(exc)
        if re.search(r"manifest unknown|not found|no matching manifest", text, re.I):
            return None
        raise EngineError(f"Pulling {reference} failed: {text}",
                          fix="Check the registry answers (dockerarch doctor).") from exc  # fmt: skip
    found = "/".join(p for p in (image.os, image.architecture, image.variant) if p)
    return Pulled(labels=dict(image.config.labels or {}), platform=found)


def remote_image(registry: RegistryConfig, repository: str, tag: str,
                 platform: str) -> RemoteImage | None:  # fmt: skip
    """What ``repository:tag`` in ``registry`` is for ``platform``, asked through the registry's
    API (docker's credentials): its manifest's digest, labels and platform, without pulling it.
    None when there is none; a registry that does not answer or refuses is an EngineError."""
    from dockerarch.registry import RegistryClient, RetryPolicy

    try:  # one more try at most: a build that cannot ask makes the image instead
        return RegistryClient(registry, policy=RetryPolicy(delays=(1.0,))).image(
            repository, tag, platform
        )
    except DockerarchError as exc:
        raise EngineError(f"Looking up {registry.address}/{repository}:{tag} failed: "
                          f"{exc.problem}", fix=exc.fix) from exc  # fmt: skip


def remove_tag(reference: str) -> None:
    """Untag ``reference`` (the image stays while another tag names it); gone already is fine."""
    from python_on_whales.exceptions import DockerException

    with contextlib.suppress(DockerException):
        client().image.remove(reference)


@dataclass(frozen=True, kw_only=True)
class LocalImage:
    id: str
    tags: tuple[str, ...]
    platform: str
    size: int
    created: str
    labels: dict[str, str]
    layers: int  # a base dockerarch made has one (its root filesystem); images FROM it more


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
                layers=len(image.root_fs.layers or ()),
            )
        )
    return sorted(found, key=lambda i: i.created, reverse=True)


@dataclass(frozen=True, kw_only=True)
class TaggedImage:
    tag: str
    id: str
    size: int
    tagged: float  # unix time the tag was last set (the engine's LastTagTime), 0 if unknown


def images_named(repositories: Sequence[str]) -> list[TaggedImage]:
    """Every tag of the local images in ``repositories`` (one row per tag)."""
    from datetime import datetime

    from python_on_whales.exceptions import DockerException

    found = []
    for repository in repositories:
        try:
            images = client().image.list(filters={"reference": f"{repository}:*"})
        except DockerException as exc:
            raise EngineError(f"Cannot list images: {_whales_error(exc)}", fix=START_HINT) from exc
        for image in images:
            stamp = str((image.metadata or {}).get("LastTagTime") or "")
            try:  # RFC 3339, nanoseconds and Z: Python 3.11's fromisoformat reads it
                tagged = datetime.fromisoformat(stamp).timestamp()
            except ValueError:
                tagged = 0.0
            for tag in image.repo_tags or ():
                if tag.rsplit(":", 1)[0] == repository:
                    found.append(TaggedImage(tag=tag, id=str(image.id), size=int(image.size or 0),
                                             tagged=tagged))  # fmt: skip
    return found


def remove_image(tag: str) -> None:
    """Untag ``tag``; its layers go when no other tag holds them. The engine refuses an image a
    container uses: an EngineError saying so."""
    from python_on_whales.exceptions import DockerException

    try:
        client().image.remove(tag)
    except DockerException as exc:
        raise EngineError(f"{tag} was not removed: {_whales_error(exc)}") from exc


@dataclass(frozen=True, kw_only=True)
class BuildSpec:
    """One `docker buildx build` of a rendered recipe, for one platform, on one node."""

    context_dir: Path
    platform: str
    stage: str
    output_dir: Path | None = None  # type=local export of the stage
    load_tag: str | None = None  # load the stage into the node's engine under this tag
    push_tag: str | None = None  # push the stage to a registry under this reference
    secrets: tuple[str, ...] = ()
    cache: bool = True
    cache_from: tuple[str, ...] = ()
    cache_to: str | None = None
    build_contexts: dict[str, str] | None = None
    node_context: str | None = None  # a docker context: build on that native node
    build_args: dict[str, str] | None = None
    allow: tuple[str, ...] = ()  # entitlements (network.host: a compile farm on loopback)
    labels: dict[str, str] | None = None  # on the image it loads (a machine image's key)


def stream_stdout_and_stderr(
    full_cmd: list[object], env: dict[str, str] | None = None, pass_fds: Sequence[int] = ()
) -> Iterator[tuple[str, bytes]]:
    """python-on-whales' utils.stream_stdout_and_stderr (0.81.0), with the same lines yielded
    and the same exception raised, but the stderr it keeps for that exception joined once at the
    end: its ``full_stderr += line`` copies the whole log again for every line (quadratic), and a
    build printing 40 MB of progress (numpy's x86-64 build with its compiler warnings) kept
    dockerarch at one full core for 20 minutes after buildx had ended, reading its pipe at
    9 KB/s. Installed over the name buildx's module calls (see _linear_streams)."""
    import queue
    import threading

    from python_on_whales.utils import get_docker_exception_type

    command = [str(c) for c in full_cmd]
    started = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, **env} if env is not None else None,
                               pass_fds=pass_fds)  # fmt: skip
    lines: queue.Queue[tuple[str, bytes] | None] = queue.Queue()

    def reader(pipe: IO[bytes], name: str) -> None:
        try:
            with pipe:
                for line in iter(pipe.readline, b""):
                    lines.put((name, line))
        finally:
            lines.put(None)

    for pipe, name in ((started.stdout, "stdout"), (started.stderr, "stderr")):
        assert pipe is not None
        threading.Thread(target=reader, args=(pipe, name), daemon=True).start()
    stderr: list[bytes] = []
    for _ in range(2):
        for name, line in iter(lines.get, None):
            yield name, line
            if name == "stderr":
                stderr.append(line)
    code = started.wait()
    if code != 0:
        whole = b"".join(stderr)
        raise get_docker_exception_type(whole)(
            command_launched=command, return_code=code, stderr=whole
        )


def _linear_streams() -> None:
    """python-on-whales' buildx builds stream through stream_stdout_and_stderr above
    (tests/unit/test_private_surfaces.py checks the name buildx's module calls)."""
    from python_on_whales.components.buildx import cli_wrapper

    setattr(cli_wrapper, "stream_stdout_and_stderr", stream_stdout_and_stderr)  # noqa: B010


def build_lines(spec: BuildSpec) -> Iterator[str]:
    """Run the build through python-on-whales, yielding buildx's plain progress line by line.
    Raises EngineError (with the whole output) when the build fails."""
    from python_on_whales.exceptions import DockerException

    _linear_streams()

    kwargs: dict[str, object] = {}
    if spec.output_dir is not None:
        kwargs["output"] = {"type": "local", "dest": str(spec.output_dir)}
    if spec.load_tag is not None:
        kwargs["load"] = True
        kwargs["tags"] = [spec.load_tag]
    if spec.push_tag is not None:
        kwargs["push"] = True
        kwargs["tags"] = [spec.push_tag]
    if spec.cache_from:  # python-on-whales takes a list of dicts: "type=registry,ref=R" -> {...}
        kwargs["cache_from"] = [
            dict(kv.split("=", 1) for kv in c.split(",")) for c in spec.cache_from
        ]
    if spec.cache_to:
        kwargs["cache_to"] = spec.cache_to
    contexts: dict[str, str | Path] = dict(spec.build_contexts or {})
    try:
        lines = client(spec.node_context).buildx.build(
            context_path=spec.context_dir,
            platforms=[spec.platform],
            target=spec.stage,
            secrets=list(spec.secrets),
            cache=spec.cache,
            build_contexts=contexts,
            build_args=spec.build_args or {},
            allow=list(spec.allow),
            labels=spec.labels or {},
            progress="plain",
            stream_logs=True,
            **kwargs,  # type: ignore[arg-type]
        )
        if not isinstance(lines, Iterator):  # stream_logs=True always gives the lines
            raise EngineError("docker buildx build gave no progress to follow")
        yield from lines
    except DockerException as exc:
        raise BuildFailed(
            f"docker buildx build exited with code {exc.return_code}", return_code=exc.return_code
        ) from exc


class BuildFailed(EngineError):
    """buildx ended in failure: a step failed (the caller has the log and reports the failing
    step), or buildx itself was stopped (``return_code``: negative for a signal)."""

    def __init__(self, problem: str, *, return_code: int | None = None) -> None:
        super().__init__(problem)
        self.return_code = return_code


def run_in_image(
    image: str,
    platform: str,
    command: str,
    context: str | None = None,
    timeout: int | None = None,
    network: str | None = None,
    volumes: tuple[tuple[str, str], ...] = (),
    writable: tuple[tuple[str, str], ...] = (),
    user: str | None = None,
) -> tuple[int, str]:
    """Run ``sh -c command`` in a throw-away container; (exit code, output: stdout and stderr
    together, so nothing of it reaches this process's terminal, and the log gets all of it).
    With ``timeout`` (seconds) the image's own ``timeout`` ends it: exit code 124. ``volumes``:
    (host directory, container path) pairs, mounted read-only; ``writable`` the same, written
    to (as ``user``, uid:gid, when given)."""
    from python_on_whales.exceptions import DockerException

    if timeout is not None:
        command = f"exec timeout -k 10 {int(timeout)} sh -c {shlex.quote(command)}"
    try:
        output = client(context).run(
            image, ["sh", "-c", "exec 2>&1; " + command], platform=platform, remove=True,
            tty=False, networks=[network] if network else [],
            volumes=[(source, target, "ro") for source, target in volumes]
            + [(source, target, "rw") for source, target in writable],
            user=user,
        )  # fmt: skip
    except DockerException as exc:
        text = ((exc.stdout or "") + (exc.stderr or "")).strip()
        return exc.return_code, text
    return 0, str(output or "")


def copy_image(reference: str, to_context: str) -> None:
    """Copy a local image to the engine of a docker context (`docker save | docker load`): native
    nodes get the base without a registry both can reach. Each side's stderr is kept: a node
    whose disk fills mid-copy ends its load ("no space left on device"), and that is the error,
    not the broken pipe the save then meets."""
    save_argv = [*client().client_config.docker_cmd, "save", reference]
    load_argv = [*client(to_context).client_config.docker_cmd, "load", "--quiet"]
    try:
        save = subprocess.Popen(save_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise EngineError(f"Cannot run docker: {exc}", fix=START_HINT) from exc
    assert save.stdout is not None and save.stderr is not None
    try:
        load = subprocess.run(load_argv, stdin=save.stdout, capture_output=True, check=False)
    finally:
        save.stdout.close()  # the save gets SIGPIPE if the load ended first
        saved_error = save.stderr.read()
        save.wait()
    said = []
    for side, code, text in (("docker save", save.returncode, saved_error),
                             ("docker load there", load.returncode, load.stderr)):  # fmt: skip
        if code != 0:
            words = " ".join(text.decode(errors="replace").split())[:300]
            said.append(f"{side}: {words or f'exit code {code}'}")
    if said:
        raise EngineError(
            f"Copying {reference} to builder node '{to_context}' failed: {'; '.join(said)}",
            fix="Check the node answers (dockerarch builder ls).",
        )


def image_platform(reference: str) -> str:
    """os/architecture[/variant] of a local image, as its config records it."""
    from python_on_whales.exceptions import DockerException

    try:
        image = client().image.inspect(reference)
    except DockerException as exc:
        raise EngineError(f"Cannot inspect image {reference}: {_whales_error(exc)}") from exc
    return "/".join(p for p in (image.os, image.architecture, image.variant) if p)


class PushFailed(EngineError):
    """`docker push` failed; ``text`` is what docker said (for the caller's retry policy)."""

    def __init__(self, problem: str, text: str) -> None:
        super().__init__(problem)
        self.text = text


def push_image(local: str, remote: str) -> str:
    """Tag ``local`` as ``remote`` and push it with the engine (which reads docker's credential
    store itself); the manifest digest docker reports. One try: the caller retries."""
    from python_on_whales.exceptions import DockerException

    docker = client()
    digest = None
    try:
        docker.image.tag(local, remote)
        for _, raw in docker.image.push(remote, stream_logs=True) or ():
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            found = re.search(r"digest: (sha256:[0-9a-f]{64})", line)
            if found:
                digest = found.group(1)
    except DockerException as exc:
        text = " ".join(((exc.stderr or "") + " " + (exc.stdout or "")).split())
        raise PushFailed(f"docker push {remote} failed: {text[-400:]}", text) from exc
    if digest is None:
        raise PushFailed(f"docker push {remote} reported no digest", "")
    return digest


def save_image(reference: str, dest: Path) -> None:
    """`docker save` of one image into ``dest`` (a docker-archive that is also an OCI layout)."""
    from python_on_whales.exceptions import DockerException

    try:
        client().image.save(reference, output=dest)
    except DockerException as exc:
        raise EngineError(f"docker save {reference} failed: {_whales_error(exc)}") from exc


@dataclass(frozen=True, kw_only=True)
class Service:
    """A long-running container dockerarch started (a compile farm server)."""

    name: str
    image: str
    running: bool
    labels: dict[str, str]


def start_service(image: str, name: str, command: list[str], labels: dict[str, str]) -> str:
    """Run ``command`` in a detached container on the host's network, restarted with the engine
    unless stopped; its id. An old container of the same name is replaced."""
    from python_on_whales.exceptions import DockerException

    docker = client()
    try:
        if docker.container.exists(name):
            docker.container.remove(name, force=True)
        container = docker.run(image, command, name=name, detach=True, networks=["host"],
                               labels=labels, restart="unless-stopped")  # fmt: skip
    except DockerException as exc:
        raise EngineError(
            f"Starting container {name} from {image} failed: {_whales_error(exc)}"
        ) from exc
    return str(getattr(container, "id", container))


def services(label: str) -> list[Service]:
    """The containers carrying ``label``, running or not."""
    from python_on_whales.exceptions import DockerException

    try:
        found = client().container.list(all=True, filters={"label": label})
    except DockerException as exc:
        raise EngineError(f"Listing containers failed: {_whales_error(exc)}") from exc
    return [
        Service(
            name=c.name,
            image=str(c.config.image),
            running=bool(c.state.running),
            labels=dict(c.config.labels or {}),
        )
        for c in found
    ]


def service_log(name: str) -> str:
    """A container's output so far (stdout and stderr)."""
    from python_on_whales.exceptions import DockerException

    try:
        return str(client().container.logs(name))
    except DockerException as exc:
        raise EngineError(f"Reading the log of {name} failed: {_whales_error(exc)}") from exc


def stop_service(name: str) -> None:
    from python_on_whales.exceptions import DockerException

    try:
        client().container.remove(name, force=True)
    except DockerException as exc:
        raise EngineError(f"Stopping container {name} failed: {_whales_error(exc)}") from exc
