"""Where upload credentials for a package index come from: where twine users keep them
(TWINE_USERNAME/TWINE_PASSWORD, ~/.pypirc, keyring), or for the index scripts/setup-host runs,
its root-only file. Never argv, output or results."""

from __future__ import annotations

import configparser
import contextlib
import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from dockerarch.config import is_loopback
from dockerarch.errors import UsageError

STATE_PYPIRC = "index/pypirc"  # below the state directory: scripts/setup-host's index


@dataclass(frozen=True)
class Credentials:
    username: str | None
    password: str | None
    source: str  # where they came from, for messages (never the secret)

    def __repr__(self) -> str:  # never the password, not even in a traceback
        return f"Credentials(username={self.username!r}, source={self.source!r})"


CREDENTIALS_FIX = (
    "Give credentials where twine looks for them: a ~/.pypirc section whose repository is the "
    "index's URL (with username and password), keyring (keyring set URL USERNAME), or "
    "TWINE_USERNAME and TWINE_PASSWORD in the environment; never on the command line."
)


def _norm(url: str) -> str:
    return url.rstrip("/") + "/"


def _pypirc_match(path: Path, url: str) -> tuple[str, configparser.SectionProxy] | None:
    """The .pypirc section whose repository URL is the longest prefix of ``url``."""
    parser = configparser.RawConfigParser()
    try:
        if not parser.read(path):
            return None
    except (configparser.Error, UnicodeDecodeError) as exc:
        # The parser's message could quote a secret: name the file only.
        raise UsageError(f"{path} is not a valid .pypirc ({type(exc).__name__})",
                         fix="Fix its syntax; see the .pypirc specification.") from None  # fmt: skip
    best: tuple[str, configparser.SectionProxy] | None = None
    for name in parser.sections():
        repo = parser[name].get("repository")
        if repo and _norm(url).startswith(_norm(repo)):
            if best is None or len(_norm(repo)) > len(_norm(best[1]["repository"])):
                best = (name, parser[name])
    return best


def credentials(url: str, *, state_dir: Path, home: Path | None = None) -> Credentials:
    """Upload credentials for ``url``: TWINE_USERNAME/TWINE_PASSWORD, else the ~/.pypirc section
    whose repository is the longest prefix of the URL, else keyring (as twine asks it: the URL as
    the service), else scripts/setup-host's file for its own index, else none (an index that
    takes anonymous uploads)."""
    env_user, env_pass = os.environ.get("TWINE_USERNAME"), os.environ.get("TWINE_PASSWORD")
    if env_pass:
        return Credentials(env_user or "__token__", env_pass, "TWINE_USERNAME/TWINE_PASSWORD")
    pypirc = Path(os.environ.get("TWINE_CONFIG_FILE") or (home or Path.home()) / ".pypirc")
    match = _pypirc_match(pypirc, url) if pypirc.is_file() else None
    if match and match[1].get("password"):
        return Credentials(match[1].get("username", "__token__"), match[1]["password"],
                           f"{pypirc} [{match[0]}]")  # fmt: skip
    username = env_user or (match[1].get("username") if match else None)
    password = _keyring_password(url, username)
    if password:
        return Credentials(username or "__token__", password, "keyring")
    local = state_dir / STATE_PYPIRC
    try:
        found = None
        if local.is_file():  # its own URL, else this machine's index reached by another address
            found = _pypirc_match(local, url) or _pypirc_match(local, _as_loopback(url))
    except PermissionError:
        found = None
    if found and found[1].get("password"):
        return Credentials(found[1].get("username"), found[1]["password"],
                           f"scripts/setup-host's index credentials ({local})")  # fmt: skip
    return Credentials(username, None, "none found")


def _as_loopback(url: str) -> str:
    """``url`` with its host replaced by 127.0.0.1 when the host is this machine (loopback, or an
    address of one of its interfaces, as a LAN index set up with --index-addr 0.0.0.0:3141 is
    reached): scripts/setup-host writes its index's credentials for the loopback URL."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if is_loopback(host) or not this_machine(host):
        return url
    netloc = "127.0.0.1" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def this_machine(host: str) -> bool:
    """Whether ``host`` names this machine: loopback, or an address a socket can be bound to here
    (only an interface's own address can; nothing is sent)."""
    if is_loopback(host):
        return True
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, address in found:
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((address[0], 0))
            return True
    return False


def _keyring_password(url: str, username: str | None) -> str | None:
    try:
        import keyring
        from keyring.errors import KeyringError
    except ImportError:
        return None
    try:
        if username is None:
            credential = keyring.get_credential(url, None)
            return credential.password if credential else None
        return keyring.get_password(url, username)
    except (KeyringError, RuntimeError):
        return None
