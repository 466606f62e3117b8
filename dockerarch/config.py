"""The project's configuration files, read into frozen dataclasses.

Unknown keys are rejected with their dotted path and a "did you mean" suggestion, so a typo never
silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockerarch.errors import ConfigError, UsageError

REGISTRY_FILE = "registry.yaml"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


def load_yaml(path: Path) -> Any:
    import yaml

    if path.is_dir():
        raise ConfigError(
            f"{path} is a directory, not a YAML file", fix="Give the path of the file itself."
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} is not UTF-8 text: byte 0x{exc.object[exc.start]:02x} on line {line} is not "
            "valid UTF-8",
            fix="Save the file as UTF-8 (YAML files are UTF-8).",
        ) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"{where} is not valid YAML: {problem}", fix="Fix the file's syntax."
        ) from exc


def require_mapping(value: Any, where: str, source: Path) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"'{where}' in {source} must be a mapping of keys to values, not {type(value).__name__}"
        )
    return value


def reject_unknown(
    mapping: Mapping[str, Any], allowed: Iterable[str], where: str, source: Path
) -> None:
    allowed = list(allowed)
    for key in mapping:
        if key not in allowed:
            dotted = f"{where}.{key}" if where else str(key)
            raise ConfigError(
                f"Unknown key '{dotted}' in {source}.{did_you_mean(str(key), allowed)}",
                fix=f"Valid keys there: {', '.join(allowed)}.",
            )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine
    only: localhost, 127.0.0.0/8 or ::1. The one definition dockerarch uses."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str:
    """The host of ``url`` ('' when it has none, or the URL cannot be read)."""
    try:
        return urllib.parse.urlsplit(url).hostname or ""
    except ValueError:
        return ""


_INDEX_URL = "http://127.0.0.1:3141/dockerarch/{target}/"


@dataclass(frozen=True, kw_only=True)
class IndexConfig:
    """The Python package index wheels are uploaded to: one index per board target, its URL a
    template with ``{target}``, so that pip on a board only ever sees wheels made for its OS
    release (as piwheels keeps one index per Raspberry Pi OS release). ``url`` is where uploads go
    (the legacy upload API twine speaks), ``simple`` where pip reads (PEP 503/691)."""

    url: str = _INDEX_URL
    simple: str = _INDEX_URL + "+simple/"
    ca: Path | None = None  # a CA bundle that signed the index's TLS certificate
    insecure: bool = False  # credentials may go over plain HTTP to an index not on loopback

    def upload_url(self, target: str) -> str:
        return self.url.replace("{target}", target)

    def simple_url(self, target: str) -> str:
        return self.simple.replace("{target}", target)

    @property
    def server(self) -> str:
        """scheme://host[:port] of the upload URL."""
        parts = urllib.parse.urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def loopback(self) -> bool:
        """Whether uploads go to this machine only."""
        return is_loopback(url_host(self.url))

    @property
    def exposes_credentials(self) -> bool:
        """Whether credentials sent to ``url`` would cross a network in clear text."""
        return self.url.startswith("http://") and not self.loopback

    @property
    def simple_loopback(self) -> bool:
        """Whether the index boards read is this machine's only (no board reaches it)."""
        return is_loopback(url_host(self.simple))


@dataclass(frozen=True, kw_only=True)
class CompilerCacheConfig:
    """A compiler cache shared by every machine of a team (ccache's remote storage over HTTP,
    scripts/setup-host's nginx or any server taking GET and PUT): hybrid builds look up each
    compile locally, then there, and write both (``read_only``: never write, for CI runners of
    untrusted branches). Objects are kept under the toolchain's digest. Credentials never go
    here (DOCKERARCH_CACHE_USERNAME/PASSWORD, ~/.netrc, or setup-host's own file)."""

    url: str  # http://HOST:PORT/PATH/
    read_only: bool = False
    insecure: bool = False  # credentials may go over plain HTTP to a server not on loopback
    # which builds get the writer's credential: "own" (trees the user gave: compilercache) or
    # "all" (every build, fetched sdists included: a machine that builds only what it vouches for)
    writes: str = "own"

    @property
    def host(self) -> str:
        return url_host(self.url)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


@dataclass(frozen=True, kw_only=True)
class RegistryConfig:
    """Where images and multi-arch indexes are pushed, and boards pull from."""

    address: str = "127.0.0.1:5000"
    insecure: bool = True
    namespace: str = "dockerarch"
    cache: bool = False  # share build caches through the registry (dockerarch build)
    # machine images (bases, toolchain and native Python images, runtime bases) through the
    # registry, by key: "pull" (taken when there, never written: an untrusted runner), "push"
    # (also pushed once made), "off"
    machine_images: str = "pull"
    ca: Path | None = None  # a CA bundle that signed the registry's TLS certificate
    index: IndexConfig = dataclasses.field(default_factory=IndexConfig)
    farm: tuple[FarmServer, ...] = ()  # compile farm servers (dockerarch build)
    compiler_cache: CompilerCacheConfig | None = None  # a team's shared compiler cache
    source: str = "built-in defaults"

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0] if ":" in self.address else self.address

    @property
    def cache_repository(self) -> str:
        """Where build stages are pushed with their inline cache, one tag per build."""
        return f"{self.address}/{self.namespace}/buildcache"

    @property
    def loopback(self) -> bool:
        """Whether the registry is on this machine only (a native node cannot reach it)."""
        return is_loopback(self.host)

    @property
    def api_url(self) -> str:
        scheme = "http" if self.insecure else "https"
        return f"{scheme}://{self.address}/v2/"


MACHINE_IMAGE_MODES = ("pull", "push", "off")
_ADDRESS = re.compile(r"^[A-Za-z0-9.-]+(:\d{1,5})?$")
_NAMESPACE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")


def find_registry_file(explicit: Path | None = None) -> Path | None:
    """``explicit``, else $DOCKERARCH_REGISTRY_CONFIG, else ./registry.yaml if present."""
    env = os.environ.get("DOCKERARCH_REGISTRY_CONFIG")
    given, how = (
        (explicit, "")
        if explicit is not None
        else ((Path(env), " (named by $DOCKERARCH_REGISTRY_CONFIG)") if env else (None, ""))
    )
    if given is not None:
        if given.is_dir():
            raise ConfigError(
                f"{given}{how} is a directory, not a registry configuration file",
                fix=f"Name the file itself, e.g. {given / REGISTRY_FILE}.",
            )
        if not given.is_file():
            raise ConfigError(f"{given}{how} does not exist", fix="Name an existing registry.yaml.")
        return given
    local = Path.cwd() / REGISTRY_FILE
    return local if local.is_file() else None


def load_registry_config(explicit: Path | None = None) -> RegistryConfig:
    """The registry configuration in force: ``explicit``, $DOCKERARCH_REGISTRY_CONFIG or
    ./registry.yaml, else the one dockerarch ships (dockerarch/data/registry.yaml)."""
    from dockerarch.paths import data_path

    path = find_registry_file(explicit)
    if path is None:
        builtin = parse_registry_config(data_path(REGISTRY_FILE))
        return dataclasses.replace(builtin, source="built-in defaults")
    return parse_registry_config(path)


def parse_registry_config(path: Path) -> RegistryConfig:
    top = require_mapping(load_yaml(path), "", path)
    reject_unknown(top, ["registry", "index", "farm", "compiler_cache"], "", path)
    section = require_mapping(top.get("registry"), "registry", path)
    reject_unknown(section, ["address", "insecure", "ca", "namespace", "cache", "machine_images"],
                   "registry", path)  # fmt: skip
    defaults = RegistryConfig()
    address = str(section.get("address", defaults.address))
    if not _ADDRESS.match(address):
        raise ConfigError(
            f"'registry.address' in {path} is {address!r}, not HOST or HOST:PORT",
            fix="Write it like 127.0.0.1:5000.",
        )
    port = address.rpartition(":")[2] if ":" in address else None
    if port is not None and not 0 < int(port) <= 65535:
        raise ConfigError(
            f"'registry.address' in {path} has port {port}, which no TCP port is (1-65535)",
            fix="Write the port the registry listens on, like 127.0.0.1:5000.",
        )
    insecure = section.get("insecure", defaults.insecure)
    if not isinstance(insecure, bool):
        raise ConfigError(f"'registry.insecure' in {path} must be true or false")
    namespace = str(section.get("namespace", defaults.namespace))
    if not _NAMESPACE.match(namespace):
        raise ConfigError(
            f"'registry.namespace' in {path} is {namespace!r}, not a valid repository path",
            fix="Use lowercase letters, digits and . _ - separated by /.",
        )
    cache = section.get("cache", defaults.cache)
    if not isinstance(cache, bool):
        raise ConfigError(f"'registry.cache' in {path} must be true or false")
    machine_images = section.get("machine_images", defaults.machine_images)
    if machine_images is False:  # YAML reads a bare `off` as false
        machine_images = "off"
    if machine_images not in MACHINE_IMAGE_MODES:
        raise ConfigError(
            f"'registry.machine_images' in {path} is {machine_images!r}, not one of "
            f"{', '.join(MACHINE_IMAGE_MODES)}",
            fix="pull: take the team's machine images (bases, toolchain images, runtime bases) "
            "when the registry has them; push: also push the ones this machine makes (a trusted "
            "machine); off: never.",
        )
    ca = section.get("ca")
    ca_path = None
    if ca is not None:
        if insecure:
            raise ConfigError(
                f"'registry.ca' and 'registry.insecure: true' in {path} contradict each other: "
                "a CA file is for a TLS registry, insecure means plain HTTP",
                fix="Keep 'ca' and set 'insecure: false' for a TLS registry with its own CA, or "
                "drop 'ca' for plain HTTP.",
            )
        ca_path = (path.parent / str(ca)).resolve()
        if not ca_path.is_file():
            raise ConfigError(
                f"'registry.ca' in {path} names {ca_path}, which is not a file",
                fix="Point it at the PEM file of the CA that signed the registry's certificate.",
            )
    index = parse_index_section(top.get("index"), path) if "index" in top else IndexConfig()
    farm = parse_farm_section(top.get("farm"), path) if top.get("farm") is not None else ()
    compiler_cache = (parse_compiler_cache_section(top["compiler_cache"], path)
                      if top.get("compiler_cache") is not None else None)  # fmt: skip
    return RegistryConfig(
        address=address, insecure=insecure, ca=ca_path, namespace=namespace, cache=cache,
        machine_images=str(machine_images), index=index, farm=farm, compiler_cache=compiler_cache, source=str(path),
    )  # fmt: skip


def parse_compiler_cache_section(value: Any, path: Path) -> CompilerCacheConfig:
    """``compiler_cache: {url: http://HOST:PORT/PATH/, read_only: false, insecure: false,
    writes: own}``."""
    section = require_mapping(value, "compiler_cache", path)
    reject_unknown(section, ["url", "read_only", "insecure", "writes"], "compiler_cache", path)
    if "url" not in section:
        raise ConfigError(f"'compiler_cache' in {path} has no url",
                          fix="Write it like: compiler_cache: {url: http://127.0.0.1:3142/ccache/}.")  # fmt: skip
    text = str(section["url"])
    try:
        parts = urllib.parse.urlsplit(text)
        hostname, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(f"'compiler_cache.url' in {path} is {text!r}, which is not a URL: {exc}",
                          fix="Write it like http://127.0.0.1:3142/ccache/.") from exc  # fmt: skip
    if parts.scheme == "https":
        raise ConfigError(
            f"'compiler_cache.url' in {path} is https://: ccache's HTTP storage speaks plain "
            "HTTP only",
            fix="Use http:// (on loopback, or a network you trust with insecure: true), or put "
            "the server behind a tunnel that ends on this machine's loopback.",
        )
    if parts.scheme != "http" or not hostname:
        raise ConfigError(f"'compiler_cache.url' in {path} is {text!r}, not an http:// URL",
                          fix="Write it like http://127.0.0.1:3142/ccache/.")  # fmt: skip
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"'compiler_cache.url' in {path} carries credentials in the URL; they would end up "
            "in logs and results",
            fix="Drop them from the URL: DOCKERARCH_CACHE_USERNAME/DOCKERARCH_CACHE_PASSWORD, "
            "~/.netrc, or (for this machine's server) scripts/setup-host's own file.",
        )
    if port is not None and not 0 < port <= 65535:
        raise ConfigError(f"'compiler_cache.url' in {path} has a port no TCP port is (1-65535)",
                          fix="Write the port the server listens on.")  # fmt: skip
    flags = {}
    for key in ("read_only", "insecure"):
        flags[key] = section.get(key, False)
        if not isinstance(flags[key], bool):
            raise ConfigError(f"'compiler_cache.{key}' in {path} must be true or false")
    writes = section.get("writes", "own")
    if writes not in ("own", "all"):
        raise ConfigError(
            f"'compiler_cache.writes' in {path} is {writes!r}",
            fix="Write own (only builds of trees you give write to the shared cache: the "
            "default) or all (fetched sdists' builds write too: only on a machine that builds "
            "nothing it does not vouch for).",
        )
    url = text if text.endswith("/") else text + "/"
    return CompilerCacheConfig(url=url, read_only=flags["read_only"], insecure=flags["insecure"],
                               writes=writes)  # fmt: skip


# --- compile farm servers (registry.yaml's farm:, build --farm, farm serve/stop) -------------------

FARM_PORT = 3632  # distcc's
_FARM_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")


@dataclass(frozen=True, order=True)
class FarmServer:
    """A compile farm server as distcc names one: HOST[:PORT][/SLOTS]."""

    host: str
    port: int = FARM_PORT
    slots: int | None = None  # concurrent compiles the client sends it (distcc's /N)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def distcc_host(self) -> str:
        """The server as a DISTCC_HOSTS entry (lzo-compressed: the preprocessed source shrinks
        4-5x, which counts on a LAN)."""
        return f"{self.address}{f'/{self.slots}' if self.slots else ''},lzo"


def parse_farm_server(text: str) -> FarmServer:
    """HOST[:PORT][/SLOTS], as distcc writes a host."""
    spec = text.strip()
    match = re.fullmatch(r"([^:/\s]+)(?::(\d{1,5}))?(?:/(\d{1,3}))?", spec)
    if not match or not _FARM_HOST.match(match.group(1)):
        raise UsageError(
            f"'{text}' is not a farm server",
            fix="Give HOST[:PORT][/SLOTS], like 10.0.0.5, buildbox:3632 or 10.0.0.5:3632/8 "
            "(SLOTS: compiles sent to it at once), several separated by commas.",
        )
    port = int(match.group(2) or FARM_PORT)
    slots = int(match.group(3)) if match.group(3) else None
    if not 0 < port < 65536 or slots == 0:
        raise UsageError(f"'{text}' has a port or slot count out of range",
                         fix="Use a port from 1 to 65535 and at least 1 slot.")  # fmt: skip
    return FarmServer(match.group(1), port, slots)


def parse_farm_servers(items: Iterable[str]) -> tuple[FarmServer, ...]:
    """Every server of comma-separated lists, each once, in the order given."""
    found: dict[str, FarmServer] = {}
    for item in items:
        for part in item.split(","):
            if part.strip():
                server = parse_farm_server(part)
                found.setdefault(server.address, server)
    return tuple(found.values())


def parse_farm_section(value: Any, path: Path) -> tuple[FarmServer, ...]:
    """``farm: {servers: [HOST[:PORT][/SLOTS], ...]}``: the compile farm builds use unless
    --farm/--no-farm says otherwise."""
    section = require_mapping(value, "farm", path)
    reject_unknown(section, ["servers"], "farm", path)
    servers = section.get("servers") or []
    if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        raise ConfigError(f"'farm.servers' in {path} must be a list of HOST[:PORT] strings",
                          fix="Write it like: servers: [10.0.0.5, 10.0.0.6:3632/8].")  # fmt: skip
    try:
        return parse_farm_servers(servers)
    except UsageError as exc:
        raise ConfigError(f"'farm.servers' in {path}: {exc.problem}", fix=exc.fix) from exc


def _index_url(value: Any, key: str, path: Path) -> str:
    text = str(value)
    try:
        parts = urllib.parse.urlsplit(text)
        hostname = parts.hostname
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed [ in the host
        raise ConfigError(
            f"'index.{key}' in {path} is {text!r}, which is not a URL: {exc}",
            fix="Write it like http://127.0.0.1:3141/dockerarch/{target}/ (an IPv6 address in "
            "brackets: http://[::1]:3141/...).",
        ) from exc
    if parts.scheme not in ("http", "https") or not hostname:
        raise ConfigError(
            f"'index.{key}' in {path} is {text!r}, not an http:// or https:// URL",
            fix="Write it like http://127.0.0.1:3141/dockerarch/{target}/.",
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"'index.{key}' in {path} carries credentials in the URL; they would end up in logs "
            "and in what boards are told",
            fix="Drop them from the URL and keep them where twine looks: ~/.pypirc, keyring, or "
            "TWINE_USERNAME/TWINE_PASSWORD.",
        )
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 0 < port <= 65535:
        raise ConfigError(f"'index.{key}' in {path} has a port no TCP port is (1-65535): {text!r}",
                          fix="Write the port the index listens on.")  # fmt: skip
    if "{target}" not in parts.path:
        raise ConfigError(
            f"'index.{key}' in {path} is {text!r}, which has no {{target}} in its path: every "
            "board target needs its own index (an armv7 wheel for bookworm is wrong on trixie, "
            "and pip cannot tell)",
            fix="Put {target} where the index name goes, e.g. http://HOST:3141/dockerarch/"
            "{target}/ (devpi) or https://HOST/repository/{target}/ (Nexus).",
        )
    return text if text.endswith("/") else text + "/"


def parse_index_section(value: Any, path: Path) -> IndexConfig:
    section = require_mapping(value, "index", path)
    reject_unknown(section, ["url", "simple", "ca", "insecure"], "index", path)
    if "url" in section and "simple" not in section:
        raise ConfigError(
            f"'index.url' in {path} is set but 'index.simple' is not: where pip reads an index "
            "differs between servers",
            fix="Add it: devpi serves URL+simple/ as .../{target}/+simple/, pypiserver and Nexus "
            "as .../{target}/simple/.",
        )
    defaults = IndexConfig()
    url = _index_url(section.get("url", defaults.url), "url", path)
    simple = _index_url(section.get("simple", defaults.simple), "simple", path)
    ca_path = None
    if section.get("ca") is not None:
        ca_path = (path.parent / str(section["ca"])).resolve()
        if not url.startswith("https://"):
            raise ConfigError(
                f"'index.ca' in {path} is set for a plain-HTTP index ({url})",
                fix="Use an https:// URL with the CA, or drop 'ca'.",
            )
        if not ca_path.is_file():
            raise ConfigError(
                f"'index.ca' in {path} names {ca_path}, which is not a file",
                fix="Point it at the PEM file of the CA that signed the index's certificate.",
            )
    insecure = section.get("insecure", False)
    if not isinstance(insecure, bool):
        raise ConfigError(f"'index.insecure' in {path} must be true or false")
    if insecure and url.startswith("https://"):
        raise ConfigError(
            f"'index.insecure: true' in {path} is set for an https:// index ({url})",
            fix="Drop it: it only allows credentials over plain HTTP.",
        )
    return IndexConfig(url=url, simple=simple, ca=ca_path, insecure=insecure)
