"""A compiler cache shared by a team (DESIGN §15): ccache's remote storage over HTTP behind each
hybrid build's local cache mount. Every compile looks locally, then on the server, and writes
both (read-only: never the server); a server that is down or refuses costs nothing but the
remote hits, and is said.

Keys cannot mix compilers: dockerarch-cc sets ccache's ``compiler_check`` to the toolchain's
digest (sha256 over every file of the cross compiler's packages, data/toolchain/toolchain-id)
and keeps objects under ``URL/<digest>/``, so a server shared by bookworm and trixie builds, or
by two point releases of Debian's cross gcc, never hands one the other's objects; build paths
are the same on every machine (/src/<name>).

Who may write: the server has two credentials, a writer's (GET, PUT, DELETE) and a reader's
(GET and HEAD only: the server itself refuses it anything else). A compiling step can read the
credential it is given (it is the same user as the package's own build, which runs its
setup.py or CMake scripts), so the writer's reaches only builds of the user's own code (a tree
they gave: RenderRequest.own_code); a build of code fetched from an index gets the reader's, or
no shared cache at all when this machine has none, and cannot write an object of its choosing
under a key teammates' builds compute. ``read_only`` machines (CI runners of untrusted branches)
are given the reader's credential alone; ``writes: all`` hands the writer's to every build.

The server's URL and credentials reach the compiling steps as a BuildKit secret (never a layer,
an argument, a log line or a result): registry.yaml's ``compiler_cache.url``, and credentials
from DOCKERARCH_CACHE_USERNAME/DOCKERARCH_CACHE_PASSWORD, ~/.netrc (the server's host), or for
the server scripts/setup-host runs on this machine, its root-only file; the reader's from
DOCKERARCH_CACHE_READER_USERNAME/DOCKERARCH_CACHE_READER_PASSWORD or setup-host's reader file.
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
STATE_READER = "ccache/reader-credentials"  # the reader's (GET only), likewise
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
    reader: tuple[str, str] | None = None  # the reader's (user, password): GET only

    def __repr__(self) -> str:  # never the password, not even in a traceback
        return f"RemoteCache(url={self.config.url!r}, source={self.source!r})"

    @property
    def auth(self) -> tuple[str, str] | None:
        return (self.username or "", self.password) if self.password else None

    def writes(self, *, own_code: bool) -> bool:
        """Whether a build of this code writes the shared cache (gets the writer's credential)."""
        return not self.config.read_only and (own_code or self.config.writes == "all")

    def storage(self, *, own_code: bool) -> str | None:
        """ccache's remote_storage for one build's secret: URL (credentials in it, as ccache
        takes them) and attributes; dockerarch-cc puts the toolchain's digest after the URL's
        path. The writer's credential for the user's own code (or every build with ``writes:
        all``); for anything else the reader's, read-only; None when this machine has no
        credential that build may be given (it compiles with the local cache alone)."""
        writes = self.writes(own_code=own_code)
        if writes or self.config.read_only or self.password is None:
            # a read-only machine's one credential is a reader's; an anonymous server has none
            user, password = self.username, self.password
        elif self.reader is not None:
            user, password = self.reader
        else:
            return None  # the writer's credential never reaches code that is not the user's
        parts = urllib.parse.urlsplit(self.config.url)
        netloc = parts.netloc
        if password:
            quoted = urllib.parse.quote(user or "", safe="")
            netloc = f"{quoted}:{urllib.parse.quote(password, safe='')}@{parts.netloc}"
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/")
        attributes = ["connect-timeout=1000", "operation-timeout=15000"]
        if not writes:
            attributes.append("read-only")
        return "|".join([url, *attributes])


def _state_pair(config: CompilerCacheConfig, state_dir: Path, name: str) -> tuple[str, str] | None:
    """scripts/setup-host's "USER:PASSWORD" file ``name`` for the server it runs on this machine
    (None for another server, or where this user cannot read it)."""
    from dockerarch.indexcreds import this_machine

    try:
        listen = (state_dir / STATE_LISTEN).read_text().strip()
        ours = listen.rpartition(":")[2] == str(urllib.parse.urlsplit(config.url).port or 80)
        text = (state_dir / name).read_text().strip() if ours and this_machine(config.host) else ""
    except (FileNotFoundError, PermissionError):
        text = ""
    if ":" not in text:
        return None
    user, _, password = text.partition(":")
    return user, password


def reader_credentials(config: CompilerCacheConfig, *, state_dir: Path) -> tuple[str, str] | None:
    """The reader's credential: DOCKERARCH_CACHE_READER_USERNAME/PASSWORD, else setup-host's
    reader file for the server it runs here, else none."""
    password = os.environ.get("DOCKERARCH_CACHE_READER_PASSWORD")
    if password:
        return os.environ.get("DOCKERARCH_CACHE_READER_USERNAME") or "reader", password
    return _state_pair(config, state_dir, STATE_READER)


def credentials(config: CompilerCacheConfig, *, state_dir: Path,
                home: Path | None = None) -> RemoteCache:  # fmt: skip
    """The credentials for ``config``'s server: the environment, else ~/.netrc's entry for its
    host, else scripts/setup-host's for the server it runs on this machine, else none (a server
    that takes anonymous requests); and the reader's beside them (reader_credentials)."""
    reader = reader_credentials(config, state_dir=state_dir)
    password = os.environ.get("DOCKERARCH_CACHE_PASSWORD")
    if password:
        user = os.environ.get("DOCKERARCH_CACHE_USERNAME") or "dockerarch"
        return RemoteCache(config, user, password, "DOCKERARCH_CACHE_USERNAME/PASSWORD", reader)
    rc = (home or Path.home()) / ".netrc"
    if rc.is_file():
        try:
            found = netrc.netrc(str(rc)).authenticators(config.host)
        except (netrc.NetrcParseError, OSError) as exc:
            raise CompilerCacheError(f"{rc} cannot be read ({type(exc).__name__})",
                                     fix="Fix its syntax (machine HOST login USER password "
                                     "PASSWORD).") from None  # fmt: skip
        if found and found[2]:
            return RemoteCache(config, found[0], found[2], f"{rc}", reader)
    local = _state_pair(config, state_dir, STATE_CREDENTIALS)
    if local is not None:
        source = f"scripts/setup-host's file {state_dir / STATE_CREDENTIALS}"
        return RemoteCache(config, local[0], local[1], source, reader)
    return RemoteCache(config, None, None, "none found", reader)


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


def reader_may_write(remote: RemoteCache) -> bool | None:
    """Whether the server lets the reader's credential write (a PUT of a key no compile has
    answered 2xx: it is removed again with the writer's); None when there is no reader's
    credential to try or the server does not answer. A server that does is open to poisoning by
    any build given the reader's credential: doctor says so."""
    if remote.reader is None or not remote.password:
        return None
    session = requests.Session()
    session.trust_env = False
    url = remote.config.url + PROBE + "-reader"
    try:
        answer = session.put(url, data=b"", auth=remote.reader, timeout=TIMEOUT)
        if answer.status_code in (401, 403, 405):
            return False
        if answer.ok:
            session.delete(url, auth=remote.auth, timeout=TIMEOUT)
            return True
    except requests.RequestException:
        return None
    return None
