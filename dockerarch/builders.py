"""Native ARM builder nodes, and which node builds which platform.

A node is a Docker engine on an ARM machine (a Graviton instance, a Pi 4, a Jetson) reached over
ssh:// or tcp://, or through an existing docker context. dockerarch registers it as a docker
context of its own, whose description records the platforms it builds: buildx then knows it as
a builder (docker driver) of that name, and `docker context ls` shows it. No state file of ours.

Routing is fixed, never guessed: a platform served by a registered node builds there, every
other one locally under QEMU; `--builder` forces one. A node that does not answer fails the
build (buildx#366, #2119: builds silently sent elsewhere), unless `--fallback-qemu`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from dockerarch import engine
from dockerarch.errors import EngineError, UsageError

MARKER = "dockerarch builder for "
# The oldest engine whose built-in BuildKit takes named build contexts (buildx --build-context,
# BuildKit 0.10: Docker 23.0), which every dockerarch build passes. Debian 12's docker.io (20.10,
# BuildKit 0.8) refuses them: "unsupported frontend capability moby.buildkit.frontend.contexts".
MIN_ENGINE = (23, 0)
LOCAL = "local"
NATIVE_PLATFORMS = ("linux/arm64", "linux/arm/v7")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_ENDPOINT = re.compile(r"^(ssh://[^\s@]+@[^\s]+|ssh://[^\s]+|tcp://[^\s]+|unix:///[^\s]+)$")


@dataclass(frozen=True, kw_only=True)
class Node:
    name: str
    endpoint: str
    platforms: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Route:
    """Where one platform builds: a native node (its docker context), or locally."""

    builder: str  # LOCAL or a node's name
    context: str | None  # the docker context to build through; None for the local engine
    endpoint: str
    accel: str  # "native" or "qemu"
    note: str = ""


def _contexts() -> list[tuple[str, str, str]]:
    """(name, description, docker endpoint) of every docker context."""
    from python_on_whales.exceptions import DockerException

    try:
        contexts = engine.client().context.list()
    except DockerException as exc:
        raise EngineError(f"Cannot list docker contexts: {exc}", fix=engine.START_HINT) from exc
    found = []
    for context in contexts:
        endpoints = context.endpoints or {}
        docker = endpoints.get("docker")
        host = getattr(docker, "host", None) if docker is not None else None
        description = (context.metadata or {}).get("Description") or ""
        found.append((str(context.name), str(description), str(host or "")))
    return found


def nodes() -> list[Node]:
    found = []
    for name, description, host in _contexts():
        if description.startswith(MARKER):
            platforms = tuple(p for p in description[len(MARKER) :].split(",") if p)
            found.append(Node(name=name, endpoint=host, platforms=platforms))
    return sorted(found, key=lambda n: n.name)


def add(name: str, platforms: list[str], endpoint: str, *, host_key: str | None = None,
        say: Callable[[str], None] = lambda _: None) -> Node:  # fmt: skip
    """Register the node; an ssh:// node's host key pinned first (hostkeys.pin)."""
    from python_on_whales.exceptions import DockerException

    if not _NAME.match(name) or name in (LOCAL, "default"):
        raise UsageError(
            f"'{name}' cannot name a builder node",
            fix="Use lowercase letters, digits, '.', '_' and '-', and not 'local' or 'default'.",
        )
    if not platforms:
        raise UsageError("Say which platforms the node builds", fix="--platform linux/arm64")
    for platform in platforms:
        if platform not in NATIVE_PLATFORMS:
            raise UsageError(
                f"--platform {platform} is not an ARM platform dockerarch builds",
                fix=f"Use {' or '.join(NATIVE_PLATFORMS)} (an arm64 node with 32-bit support "
                "builds both).",
            )
    existing = {c[0]: c for c in _contexts()}
    if name in existing:
        raise UsageError(
            f"A docker context named '{name}' already exists",
            fix=f"Pick another name, or remove it first (dockerarch builder rm {name}).",
        )
    if endpoint in existing:
        host = existing[endpoint][2]  # the node of an existing context
    elif _ENDPOINT.match(endpoint):
        host = endpoint
        if host.startswith("ssh://"):
            from dockerarch import hostkeys

            say(hostkeys.pin(host, host_key))
        elif host_key:
            raise UsageError(f"--host-key is for ssh:// nodes, not {endpoint}",
                             fix="Leave --host-key out.")  # fmt: skip
    else:
        raise UsageError(
            f"'{endpoint}' is neither ssh://USER@HOST, tcp://HOST:PORT, unix:///PATH nor the "
            "name of a docker context",
            fix="For example: dockerarch builder add graviton --platform linux/arm64 "
            "ssh://ubuntu@graviton.example.org",
        )
    try:
        engine.client().context.create(
            name, description=MARKER + ",".join(platforms), docker={"host": host}
        )
    except DockerException as exc:
        raise EngineError(f"Cannot create docker context '{name}': {exc}") from exc
    node = Node(name=name, endpoint=host, platforms=tuple(platforms))
    try:
        check_engine(node)
    except BaseException:
        remove(name)
        raise
    return node


def remove(name: str) -> None:
    from python_on_whales.exceptions import DockerException

    if name not in {n.name for n in nodes()}:
        raise UsageError(
            f"No builder node named '{name}'",
            fix="dockerarch builder ls lists them; docker contexts not made by dockerarch are "
            "left alone.",
        )
    try:
        engine.client().context.remove(name, force=True)
    except DockerException as exc:
        raise EngineError(f"Cannot remove docker context '{name}': {exc}") from exc


def answers(node: Node) -> str | None:
    """None when the node's engine answers, else why not."""
    return probe(node)[0]


def probe(node: Node) -> tuple[str | None, str]:
    """(why the node's engine does not answer or None, its version)."""
    from python_on_whales.exceptions import DockerException

    why = engine.reachable(node.endpoint) if node.endpoint else None
    if why:
        return why, ""
    try:
        version = engine.client(node.name).version()
    except DockerException as exc:
        return " ".join(str(exc.stderr or exc).split())[:200], ""
    if version.server is None:
        return "no server version", ""
    return None, str(version.server.version or "")


def too_old(version: str) -> str | None:
    """Why an engine of ``version`` cannot build dockerarch's builds, or None."""
    found = re.match(r"^(\d+)\.(\d+)", version)
    if found is None or (int(found.group(1)), int(found.group(2))) >= MIN_ENGINE:
        return None
    return (f"its Docker engine is {version}, whose built-in BuildKit takes no named build "
            f"contexts (they came with Docker {MIN_ENGINE[0]}.{MIN_ENGINE[1]}), and every "
            "dockerarch build passes some")  # fmt: skip


def unserved(asked: tuple[str, ...], listed: tuple[str, ...]) -> list[str]:
    """What a node was asked to build that its BuildKit does not list (an arm64 kernel lists
    linux/arm/v7 only when it runs 32-bit code)."""
    return [p for p in asked if p not in listed]


def refuse_old(node: Node, version: str, platform: str | None = None) -> None:
    """A UsageError naming the node when its engine (of ``version``) is too old to build."""
    old = too_old(version)
    if old:
        serves = f", which builds {platform}," if platform else ""
        raise UsageError(
            f"Builder node '{node.name}' ({node.endpoint}){serves} cannot build: {old}",
            fix="Install Docker 23.0 or newer on the node (Debian 13's docker.io, or Docker's "
            "own packages; Debian 12's docker.io is 20.10), or build on this machine: "
            f"--builder local (dockerarch builder rm {node.name} forgets it).",
        )


def check_engine(node: Node) -> None:
    """A UsageError naming the node when its engine answers but is too old to build, or does
    not run a platform it was added for."""
    why, version = probe(node)
    if why is not None:
        return
    refuse_old(node, version)
    listed = engine.current_builder(node.name).platforms
    missing = unserved(node.platforms, listed)
    if missing:
        raise UsageError(
            f"Builder node '{node.name}' ({node.endpoint}) does not run "
            f"{', '.join(missing)}: its BuildKit lists {', '.join(listed) or 'nothing'}",
            fix=f"Add it for what it runs (--platform {','.join(p for p in node.platforms if p in listed) or 'linux/arm64'}); "
            "the other platforms build here under QEMU.",
        )  # fmt: skip


# An arm64 kernel runs armv7 code itself (AArch32 at EL0, its compat layer), as the real arm64
# node bench/arm_node boots did (armv7 builds on it, no binfmt there): the QEMU binfmt setups
# (Debian's qemu-user-binfmt, QEMU's own script) register no arm emulator on an arm64 machine.
RUNS_ITSELF = {"amd64": {"amd64"}, "aarch64": {"aarch64", "armv7"}, "armv7": {"armv7"}}


def machine(info: dict[str, str], arch: str) -> dict[str, object]:
    """What the engine that builds reports of its machine (engine.machine_info), and whether it
    runs ``arch``'s code natively: its own kernel's architecture, or armv7 on an arm64 kernel (a
    node that claims a platform its kernel does not run runs it under binfmt)."""
    from dockerarch.targets import ARCH_ALIASES

    if "error" in info:
        return dict(info)
    kernel = ARCH_ALIASES.get(info.get("architecture", "").lower(), "")
    return {**info, "native": ARCH_ALIASES.get(arch) in RUNS_ITSELF.get(kernel, set())}


def check_forced(forced: str, known: list[Node] | None = None) -> Node:
    """The node ``--builder`` names, or a UsageError listing the known ones."""
    known = nodes() if known is None else known
    for node in known:
        if node.name == forced:
            return node
    raise UsageError(
        f"--builder {forced}: no such builder node",
        fix=f"Known: {', '.join([LOCAL, *(n.name for n in known)])} (dockerarch builder ls).",
    )


def route(platform: str, *, forced: str | None, fallback_qemu: bool) -> Route:
    """Where ``platform`` builds: the local engine builds its own platform natively."""
    from dockerarch.targets import host_arch

    host = host_arch()
    local = Route(builder=LOCAL, context=None, endpoint=engine.docker_host(),
                  accel="native" if host is not None and host.platform == platform else "qemu")  # fmt: skip
    if forced == LOCAL or (forced is None and local.accel == "native"):
        return local
    known = nodes()
    if forced is not None:
        chosen = [check_forced(forced, known)]
    else:
        chosen = [n for n in known if platform in n.platforms]
    if not chosen:
        return local
    node = chosen[0]
    why, version = probe(node)
    if why is None:
        refuse_old(node, version, platform)
        return Route(builder=node.name, context=node.name, endpoint=node.endpoint, accel="native")
    if fallback_qemu:
        return Route(builder=LOCAL, context=None, endpoint=engine.docker_host(), accel="qemu",
                     note=f"node '{node.name}' does not answer ({why}): building {platform} "
                     "locally under QEMU (--fallback-qemu)")  # fmt: skip
    raise EngineError(
        f"Builder node '{node.name}' ({node.endpoint}), which builds {platform}, does not "
        f"answer: {why}",
        fix="Start it or check the network; pass --fallback-qemu to build locally under QEMU "
        f"instead, or dockerarch builder rm {node.name}.",
    )
