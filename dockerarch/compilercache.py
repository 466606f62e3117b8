"""A compiler cache shared by a team (DESIGN §15): ccache's remote storage over HTTP behind each
hybrid build's local cache mount. Every compile looks locally, then on the server, and writes
both (read-only: never the server); a server that is down or refuses costs nothing but the
remote hits, and is said.

Keys cannot mix compilers: dockerarch-cc sets ccache's ``compiler_check`` to the toolchain's
digest (sha256 over every file of the cross compiler's packages, data/toolchain/toolchain-id)
and keeps objects under ``URL/<digest>/``, so a server shared by bookworm and trixie builds, or
by two point releases of Debian's cross gcc, never hands one the other's objects; build paths
are the same on every machine (/src/<name>).

The server's URL and credentials reach the compiling steps as a BuildKit secret (never a layer,
an argument, a log line or a result): registry.yaml's ``compiler_cache.url``, and credentials
from DOCKERARCH_CACHE_USERNAME/DOCKERARCH_CACHE_PASSWORD, ~/.netrc (the server's host), or for
the server scripts/setup-host runs on this machine, its root-only file.
"""

from __future__ import annotations

import netrc
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests

from dockerarch.config import CompilerCacheConfig
from dockerarch.errors import DockerarchError

SECRET_ID = "dockerarch-ccache-remote"  # what the compiling steps mount (macros.j2)
STATE_CREDENTIALS = "ccache/credentials"  # below the state directory: "USER:PASSWORD", root's
STATE_LISTEN = "ccache/listen"  # HOST:PORT setup-host's server listens on
PROBE = "dockerarch-probe"  # a key no compile has: 404 when the credentials are good
TIMEOUT = 5


class CompilerCacheError(DockerarchError):
    """The shared compiler cache refused this machine's credentials."""

    exit_code = 4


@dataclass(frozen=True)
class RemoteCache:
    """The shared cache as a build uses it: where, with which credentials (never printed)."""

    config: CompilerCacheConfig
    username: str | None
    password: str | None
    source: str  # where the credentials came from, for messages

    def __repr__(self) -> str:  # never the password, not even in a traceback
        return f"RemoteCache(url={self.config.url!r}, source={self.source!r})"

    @property
    def auth(self) -> tuple[str, str] | None:
        return (self.username or "", self.password) if self.password else None

    def storage(self) -> str:
        """ccache's remote_storage for the secret: URL (credentials in it, as ccache takes
        them) and attributes; dockerarch-cc puts the toolchain's digest after the URL's path."""
        parts = urllib.parse.urlsplit(self.config.url)
        netloc = parts.netloc
        if self.password:
            user = urllib.parse.quote(self.username or "", safe="")
            netloc = f"{user}:{urllib.parse.quote(self.password, safe='')}@{parts.netloc}"
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/")
        attributes = ["connect-timeout=1000", "operation-timeout=15000"]
        if self.config.read_only:
            attributes.append("read-only")
        return "|".join([url, *attributes])


def credentials(config: CompilerCacheConfig, *, state_dir: Path,
                home: Path | None = None) -> RemoteCache:  # fmt: skip
    """The credentials for ``config``'s server: the environment, else ~/.netrc's entry for its
    host, else scripts/setup-host's for the server it runs on this machine, else none (a server
    that takes anonymous requests)."""
    from dockerarch.indexcreds import this_machine

    password = os.environ.get("DOCKERARCH_CACHE_PASSWORD")
    if password:
        user = os.environ.get("DOCKERARCH_CACHE_USERNAME") or "dockerarch"
        return RemoteCache(config, user, password, "DOCKERARCH_CACHE_USERNAME/PASSWORD")
    rc = (home or Path.home()) / ".netrc"
    if rc.is_file():
        try:
            found = netrc.netrc(str(rc)).authenticators(config.host)
        except (netrc.NetrcParseError, OSError) as exc:
            raise CompilerCacheError(f"{rc} cannot be read ({type(exc).__name__})",
                                     fix="Fix its syntax (machine HOST login USER password "
                                     "PASSWORD).") from None  # fmt: skip
        if found and found[2]:
            return RemoteCache(config, found[0], found[2], f"{rc}")
    local = state_dir / STATE_CREDENTIALS
    try:
        listen = (state_dir / STATE_LISTEN).read_text().strip()
        ours = listen.rpartition(":")[2] == str(urllib.parse.urlsplit(config.url).port or 80)
        text = local.read_text().strip() if ours and this_machine(config.host) else ""
    except (FileNotFoundError, PermissionError):
        text = ""
    if ":" in text:
        user, _, password = text.partition(":")
        return RemoteCache(config, user, password, f"scripts/setup-host's file {local}")
    return RemoteCache(config, None, None, "none found")


def check(remote: RemoteCache, say: Callable[[str], None]) -> RemoteCache | None:
    """Before the build: the server answers and takes the credentials (a key no compile has is
    asked for: 404). Refused credentials are an error now; a server that does not answer is
    said once, and the build goes on with its local cache (None)."""
    if remote.password and not remote.config.loopback and not remote.config.insecure:
        raise CompilerCacheError(
            f"The compiler cache at {remote.config.url} is plain HTTP on another machine: the "
            f"credentials ({remote.source}) would cross the network in clear text",
            fix="Say so in registry.yaml if the network is yours: compiler_cache: {insecure: "
            "true}; or reach the server through a tunnel that ends on loopback.",
        )
    session = requests.Session()
    session.trust_env = False  # the team's server is reached directly, never by proxy
    url = remote.config.url + PROBE
    try:
        answer = session.get(url, auth=remote.auth, timeout=TIMEOUT, allow_redirects=False)
    except requests.RequestException as exc:
        say(f"compiler cache: {remote.config.url} does not answer ({type(exc).__name__}): "
            "compiling with this machine's cache only")  # fmt: skip
        return None
    if answer.status_code in (401, 403):
        raise CompilerCacheError(
            f"The compiler cache at {remote.config.url} refused this machine's credentials "
            f"({answer.status_code}; credentials: {remote.source})",
            fix="Give the right ones in DOCKERARCH_CACHE_USERNAME/DOCKERARCH_CACHE_PASSWORD or "
            f"~/.netrc (machine {remote.config.host} login USER password PASSWORD), or build "
            "without it: --no-compiler-cache.",
        )
    if answer.status_code not in (200, 404):
        say(f"compiler cache: {remote.config.url} answered {answer.status_code} "
            f"{answer.reason}: compiling with this machine's cache only")  # fmt: skip
        return None
    return remote
