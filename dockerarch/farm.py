"""Compile farms: hybrid builds' compiles spread over x86-64 machines with distcc (DESIGN §13).

A farm server is distccd in a container on any x86-64 machine with Docker (`dockerarch farm
serve`): the image installs Debian's cross compilers of the targets asked for from the same
amd64 base as a hybrid build's toolchain stage, and whitelists them only under names that carry
each toolchain's digest (data/toolchain/toolchain-id: sha256 over the compiler packages' files),
dockerarch-<digest>-<triplet>-gcc and -g++. A build (`dockerarch build --farm HOST[:PORT],...`)
runs distcc inside the emulated stage, natively, behind ccache (dockerarch-distcc), calling the
compilers by those names: a server whose compilers are other files (a patch level apart) has no
such name and cannot take a compile, which distcc's whitelist would otherwise let through.
Before the build, each server compiles a probe with this build's own toolchain stage as the
client; one that does not answer or has another toolchain is left out, and said. A native
(amd64) build does the same from its build stage, whose gcc and g++ become the same driver
(data/toolchain/native-farm); a server serves it the suite's native gcc and g++.

distcc is the engine: its client preprocesses locally, ships the result over TCP, keeps a slot
lock per server and backs off from a server that failed; dockerarch-distcc records where each
compile ran from distcc's own log, so nothing is absorbed silently.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import re
import shlex
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dockerarch import accel, paths
from dockerarch.config import FarmServer, parse_farm_server
from dockerarch.errors import UsageError
from dockerarch.files import context_name
from dockerarch.targets import BoardTarget

if TYPE_CHECKING:
    from dockerarch.render import RenderRequest

DEFAULT_SLOTS = 4  # distcc's limit of compiles sent at once to a server without /SLOTS
JOBS_OPTION = "MAX_JOBS"  # the recipes' option for compiles at once
LABEL = "org.dockerarch.farm"
IMAGE = "dockerarch/farm"
FARM_INFO = "/etc/dockerarch-farm"  # in a server's image: "TARGET TRIPLET DIGEST" per line


def hosts_line(servers: Sequence[FarmServer], local_slots: int) -> str:
    """DISTCC_HOSTS for a build: the servers in random order per compile (a build that compiles
    one file at a time still uses them all), and this machine as one more place."""
    entries = [s.distcc_host() for s in servers]
    if local_slots > 0:
        entries.append(f"localhost/{local_slots}")
    return " ".join(["--randomize", *entries]) if len(entries) > 1 else " ".join(entries)


def farm_jobs(servers: Sequence[FarmServer], local_cores: int) -> int:
    """Compiles at once that keep every place busy: this machine's cores and each server's
    slots (distcc makes the rest wait for a slot)."""
    return local_cores + sum(s.slots or DEFAULT_SLOTS for s in servers)


def check_farm_jobs(requests: Sequence[RenderRequest], servers: Sequence[FarmServer],
                    local_cores: int) -> None:  # fmt: skip
    """Before anything is built: the most compiles at once the farm could ask for (every
    server usable) must be a value each recipe's MAX_JOBS takes (a /SLOTS of 999 would render
    make -j 2000)."""
    jobs = str(farm_jobs(servers, local_cores))
    for request in requests:
        option = request.recipe.options.get(JOBS_OPTION)
        if option is None:
            continue
        try:
            option.check(jobs, request.recipe.name)
        except UsageError as exc:
            raise UsageError(
                f"The farm's slots would set {JOBS_OPTION}={jobs} (this machine's {local_cores} "
                f"cores and every server's /SLOTS, {DEFAULT_SLOTS} where none is given), which "
                f"recipe '{request.recipe.name}' does not take: {exc.problem}",
                fix=f"Give the servers fewer slots (HOST/SLOTS), or choose: --set {JOBS_OPTION}=N.",
            ) from None


def with_farm_jobs(request: RenderRequest, servers: Sequence[FarmServer], local_cores: int,
                   *, fixed: bool) -> RenderRequest:  # fmt: skip
    """With a farm in use, a recipe compiles as many files at once as there are places (its
    MAX_JOBS, unless --set gave it, ``fixed``): two at a time would leave the servers idle. Called
    once the probe has said which servers take this build's compiles; a build the farm does not
    serve keeps its MAX_JOBS."""
    if fixed or JOBS_OPTION not in request.recipe.options or not servers:
        return request
    jobs = str(farm_jobs(servers, local_cores))
    return dataclasses.replace(request, options={**request.options, JOBS_OPTION: jobs})


def compiler_name(digest: str, triplet: str, tool: str) -> str:
    """A cross compiler's name on a farm: the toolchain's digest in it."""
    return f"dockerarch-{digest[:16]}-{triplet}-{tool}"


# --- the server side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerImage:
    tag: str
    dockerfile: str


def server_image(targets: Sequence[BoardTarget], toolchain_base: BoardTarget) -> ServerImage:
    """The Dockerfile of a server for ``targets`` (their cross compilers, or an amd64 target's
    native ones, and distcc on the hybrid toolchain's amd64 base), tagged by its content."""
    from dockerarch import render

    env = render.template_environment(tuple(paths.template_dirs()))  # the recipes' template path
    compilers = [
        {
            "target": t.name,
            "triplet": t.triplet,
            "debian_arch": t.debian_arch,
            "packages": list(_compiler_packages(t)),
            "gcc": t.gcc,
        }
        for t in sorted(targets, key=lambda t: t.name)
    ]
    text = env.get_template("farm.Dockerfile.j2").render(
        base_image=toolchain_base.base_image, base_target=toolchain_base.name,
        compilers=compilers, info=FARM_INFO,
        context=accel.CONTEXT_DIR,
    )  # fmt: skip
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return ServerImage(tag=f"{IMAGE}:{digest}", dockerfile=text)


def _compiler_packages(target: BoardTarget) -> tuple[str, ...]:
    if target.arch.name == "amd64":  # a native build's own compilers
        return accel.native_packages(target.gcc)
    return accel.cross_packages(target.triplet, target.gcc)


def container_name(server: FarmServer) -> str:
    return "dockerarch-farm-" + re.sub(r"[^A-Za-z0-9_.-]", "-", f"{server.host}-{server.port}")


def serve_command(server: FarmServer, allow: Sequence[str], jobs: int) -> list[str]:
    """distccd in the foreground, logging each compile (COMPILE_OK) to the container's log."""
    argv = ["distccd", "--daemon", "--no-detach", "--log-stderr", "--log-level", "info",
            "--listen", server.host, "--port", str(server.port), "--jobs", str(jobs),
            "--nice", "5"]  # fmt: skip
    for network in allow:
        argv += ["--allow", network]
    return argv


WIDEST_IPV4, WIDEST_IPV6 = 8, 48  # a 10.0.0.0/8 company network; an IPv6 site


def check_allow(items: Iterable[str], *, wide: bool = False) -> tuple[str, ...]:
    """--allow networks as distccd takes them (ADDRESS or ADDRESS/BITS). distccd has no
    authentication and runs the compilers it whitelists for anyone it allows: a network wider
    than an IPv4 /8 or an IPv6 /48 (0.0.0.0/0, ::/0, 1.2.3.4/0) is refused unless ``wide``
    (--unsafe-allow-wide-network) says it is meant."""
    found = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                network = ipaddress.ip_network(part, strict=False)
            except ValueError:
                raise UsageError(
                    f"--allow {part} is not an address or network",
                    fix="Name the clients' network, like 10.0.0.0/24 or 127.0.0.1 (distccd "
                    "serves nobody else; there is no password).",
                ) from None
            widest = WIDEST_IPV4 if network.version == 4 else WIDEST_IPV6
            if network.prefixlen < widest and not wide:
                raise UsageError(
                    f"--allow {part} lets {network.num_addresses:,} addresses run compilers on "
                    f"this machine (it is {network}): distccd has no password, so anyone who "
                    "reaches it may",
                    fix=f"Name your build machines' network (at most a /{widest}, like "
                    "10.0.0.0/24); if you really mean it, add --unsafe-allow-wide-network.",
                )
            found.append(part)
    if not found:
        raise UsageError(
            "A farm server needs the networks it serves (--allow)",
            fix="Add --allow NETWORK, like --allow 10.0.0.0/24: distccd has no password, so "
            "only the build machines' addresses may reach it.",
        )
    return tuple(found)


def answers(server: FarmServer, timeout: float = 3.0) -> bool:
    """Whether something accepts TCP connections at the server's address."""
    try:
        with socket.create_connection((server.host, server.port), timeout=timeout):
            return True
    except OSError:
        return False


def parse_info(text: str) -> dict[str, str]:
    """A server image's FARM_INFO: {target: toolchain digest}."""
    found = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3:
            found[fields[0]] = fields[2]
    return found


# --- the build side -----------------------------------------------------------------------------


TOOLCHAIN_TREE = "/toolchain/usr/lib/dockerarch"  # in a hybrid build's toolchain stage
NATIVE_TREE = "/usr/lib/dockerarch"  # in a native build's build-tools stage (native-farm)


def probe_command(servers: Sequence[FarmServer], triplet: str, tree: str = TOOLCHAIN_TREE) -> str:
    """Shell, run in a build's toolchain stage (amd64, with its distcc and compilers under their
    farm names; ``tree`` is where they are, the x86-64 libraries collected with them beside it:
    the toolchain image holds the tree, not the packages it was collected from), that compiles
    a probe on each server alone with no fallback: 'digest D' first, then 'server ADDRESS CODE'
    and distcc's errors ('why ADDRESS TEXT') per server."""
    root = tree.removesuffix(NATIVE_TREE)  # "" for a tree in place at /
    lines = [
        "set -u",
        f"tree={tree}",
        *([f"export LD_LIBRARY_PATH={root}/usr/lib/x86_64-linux-gnu"] if root else []),
        'digest=$(cat "$tree/toolchain-id")',
        'echo "digest $digest"',
        "printf 'int dockerarch_farm_probe(int x) { return x + 1; }\\n' > /tmp/probe.c",
        "mkdir -p /tmp/distcc-state",
    ]
    name = f'dockerarch-$(echo "$digest" | cut -c1-16)-{triplet}-gcc'
    for n, server in enumerate(servers):
        host = shlex.quote(server.address)
        lines += [
            f"DISTCC_HOSTS={host} DISTCC_FALLBACK=0 DISTCC_VERBOSE=1 DISTCC_LOG=/tmp/probe{n}.log "
            f'DISTCC_DIR=/tmp/distcc-state PATH="$tree/farm:$PATH" DISTCC_IO_TIMEOUT=20 '
            f'timeout 60 "$tree/libexec/distcc" {name} -c /tmp/probe.c -o /tmp/probe{n}.o',
            f"echo server {host} $?",
            f"grep -h -E 'ERROR|Warning|failed' /tmp/probe{n}.log 2>/dev/null | head -n 3 "
            f"| sed 's/^distcc\\[[0-9]*\\] //; s/^/why {server.address} /'",
        ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Probe:
    digest: str
    usable: tuple[FarmServer, ...]
    refused: tuple[tuple[FarmServer, str], ...]  # (server, why), said as a warning


_NO_ANSWER = ("connection refused", "timed out", "timeout", "no route", "unreachable",
              "failed to connect", "connect to", "name or service")  # fmt: skip


def read_probe(servers: Sequence[FarmServer], output: str, target: str) -> Probe:
    digest = ""
    codes: dict[str, int] = {}
    why: dict[str, list[str]] = {}
    for line in output.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "digest":
            digest = rest.strip()
        elif kind == "server":
            address, _, status = rest.partition(" ")
            codes[address] = int(status) if status.strip().isdigit() else 1
        elif kind == "why":
            address, _, text = rest.partition(" ")
            why.setdefault(address, []).append(text.strip())
    usable: list[FarmServer] = []
    refused: list[tuple[FarmServer, str]] = []
    for server in servers:
        code = codes.get(server.address)
        if code == 0:
            usable.append(server)
            continue
        said = " ".join(why.get(server.address, [])).lower()
        if code is None:
            reason = "was not probed"
        elif code == 124 or any(w in said for w in _NO_ANSWER):
            reason = "does not answer"
        else:
            reason = (f"answers, but has not got {target}'s toolchain sha256:{digest[:16]}... "
                      "(other compiler files, or a server for other targets)")  # fmt: skip
        refused.append((server, reason))
    return Probe(digest=digest, usable=tuple(usable), refused=tuple(refused))


@dataclass(frozen=True)
class Placement:
    """Where a build's farm compiles ran (dockerarch-distcc's log)."""

    places: dict[str, int]  # "127.0.0.2:3632" or "localhost": compiles
    retried: dict[str, int]  # server that failed: compiles done again elsewhere
    failed: int  # compiles that failed wherever they ran (a compile error)

    @classmethod
    def parse(cls, text: str) -> Placement:
        places: dict[str, int] = {}
        retried: dict[str, int] = {}
        failed = 0
        for line in text.splitlines():
            fields = line.split()
            if len(fields) < 2:
                continue
            places[fields[0]] = places.get(fields[0], 0) + 1
            failed += fields[1] != "ok"
            if len(fields) >= 4 and fields[2] == "retried-after":
                for server in fields[3].split(","):
                    retried[server] = retried.get(server, 0) + 1
        return cls(places=places, retried=retried, failed=failed)

    @property
    def total(self) -> int:
        return sum(self.places.values())

    def as_dict(self) -> dict[str, object]:
        return {"places": dict(self.places), "retried": dict(self.retried),
                "failed": self.failed}  # fmt: skip

    def lines(self) -> list[str]:
        if not self.total:
            return []
        where = ", ".join(f"{n} on {'this machine' if p == 'localhost' else p}"
                          for p, n in sorted(self.places.items(), key=lambda kv: -kv[1]))  # fmt: skip
        said = [f"farm: {self.total} compiles: {where}"]
        said += [f"farm: {s} failed {n} compile{'s' if n != 1 else ''}, done again elsewhere"
                 for s, n in self.retried.items()]  # fmt: skip
        return said


def say_refused(probe: Probe, say: Callable[[str], None]) -> None:
    for server, reason in probe.refused:
        say(f"warning: farm server {server.address} left out: it {reason}")


# --- farm serve / ls / stop -----------------------------------------------------------------------


@dataclass(frozen=True)
class Running:
    """A farm server on this machine's engine."""

    server: FarmServer
    container: str
    image: str
    running: bool
    digests: dict[str, str]  # target: toolchain digest
    allow: tuple[str, ...] = ()  # the networks it serves (--allow)


def _labels(server: FarmServer, digests: dict[str, str], allow: Sequence[str]) -> dict[str, str]:
    return {LABEL: "1", f"{LABEL}.listen": server.address,
            f"{LABEL}.toolchains": ",".join(f"{t}={d}" for t, d in sorted(digests.items())),
            f"{LABEL}.allow": ",".join(allow)}  # fmt: skip


def _toolchain_base(targets: Sequence[BoardTarget]) -> BoardTarget:
    """The amd64 base a server is made from: the ARM targets' hybrid toolchain base, which is an
    amd64 target's own base (its native builds' compilers are that suite's gcc)."""
    from dockerarch.targets import load_targets

    known = load_targets()
    bases = {t if t.arch.name == "amd64" else accel.toolchain_base(t, known) for t in targets}
    if len(bases) != 1:
        raise UsageError(
            f"{', '.join(t.name for t in targets)} take their compilers from different "
            f"Debian suites ({', '.join(sorted(b.name for b in bases))})",
            fix="Start one farm server per suite (another --listen address or port for each).",
        )
    (base,) = bases
    return base


def build_server_image(targets: Sequence[BoardTarget], work: Path,
                       say: Callable[[str], None]) -> tuple[str, dict[str, str]]:  # fmt: skip
    """The server image for ``targets`` in the local engine (built, or found cached), and the
    toolchain digest of each target it serves."""
    from dockerarch import engine
    from dockerarch.errors import EngineError

    base = _toolchain_base(targets)
    from dockerarch.base import ensure_base

    ensure_base(base, say)
    image = server_image(targets, base)
    context = work / context_name("farm-context", work)
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(image.dockerfile)
    accel.prepare_context(context)
    say(f"building the farm server image {image.tag} (Debian's compilers and distcc)")
    spec = engine.BuildSpec(context_dir=context, platform="linux/amd64", stage="server",
                            load_tag=image.tag)  # fmt: skip
    log: list[str] = []
    try:
        for line in engine.build_lines(spec):
            log.append(line.rstrip("\n"))
    except EngineError as exc:
        tail = "\n".join(log[-25:])
        raise EngineError(f"Building the farm server image failed: {exc.problem}\n{tail}",
                          fix="See the lines above; run again with --debug for all.") from exc  # fmt: skip
    code, output = engine.run_in_image(image.tag, "linux/amd64", f"cat {FARM_INFO}")
    digests = parse_info(output) if code == 0 else {}
    missing = [t.name for t in targets if t.name not in digests]
    if missing:
        raise EngineError(f"The farm server image {image.tag} has no toolchain for "
                          f"{', '.join(missing)}: {output.strip()[-300:]}")  # fmt: skip
    return image.tag, digests


def serve(targets: Sequence[BoardTarget], server: FarmServer, *, allow: Sequence[str], jobs: int,
          work: Path, say: Callable[[str], None]) -> Running:  # fmt: skip
    """Start (or replace) the farm server at ``server``'s address on this machine's engine."""
    import time

    from dockerarch import engine
    from dockerarch.errors import EngineError

    _toolchain_base(targets)  # what cannot be served is said before the engine is asked
    mine = {r.server.address: r for r in running()}
    if answers(server, timeout=1.0) and server.address not in mine:
        raise UsageError(
            f"Something already listens on {server.address}",
            fix="Give another --listen address or port, or stop that program.",
        )
    tag, digests = build_server_image(targets, work, say)
    name = container_name(server)
    engine.start_service(
        tag, name, serve_command(server, allow, jobs), _labels(server, digests, allow)
    )
    deadline = time.monotonic() + 20
    while not answers(server, timeout=1.0):
        if time.monotonic() > deadline:
            log = engine.service_log(name)
            engine.stop_service(name)
            raise EngineError(
                f"The farm server did not start listening on {server.address}: "
                f"{log.strip()[-400:] or 'it printed nothing'}",
                fix="Check the address is one of this machine's (ip -brief address).",
            )
        time.sleep(0.3)
    return Running(
        server=server, container=name, image=tag, running=True, digests=digests, allow=tuple(allow)
    )


def running() -> list[Running]:
    """The farm servers on this machine's engine."""
    from dockerarch import engine

    found = []
    for service in engine.services(LABEL):
        address = service.labels.get(f"{LABEL}.listen", "")
        try:
            server = parse_farm_server(address)
        except UsageError:
            continue
        digests = dict(p.split("=", 1) for p in
                       service.labels.get(f"{LABEL}.toolchains", "").split(",") if "=" in p)  # fmt: skip
        allow = tuple(a for a in service.labels.get(f"{LABEL}.allow", "").split(",") if a)
        found.append(Running(server=server, container=service.name, image=service.image,
                             running=service.running, digests=digests, allow=allow))  # fmt: skip
    return sorted(found, key=lambda r: r.server)


def stop(addresses: Sequence[FarmServer]) -> list[Running]:
    """Stop the farm servers at ``addresses`` (all of this machine's when none); those stopped."""
    from dockerarch import engine

    here = running()
    if addresses:
        wanted = {s.address for s in addresses}
        unknown = wanted - {r.server.address for r in here}
        if unknown:
            raise UsageError(
                f"No farm server of this machine listens on {', '.join(sorted(unknown))}",
                fix="dockerarch farm ls lists them.",
            )
        here = [r for r in here if r.server.address in wanted]
    for r in here:
        engine.stop_service(r.container)
    return here


def compiles_served(container: str) -> int:
    """Compiles a server finished (COMPILE_OK lines of distccd's log)."""
    from dockerarch import engine

    return engine.service_log(container).count("COMPILE_OK")
