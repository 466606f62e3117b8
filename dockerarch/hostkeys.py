"""A builder node's ssh host key, pinned when the node is added.

Docker reaches an ssh:// node through the user's own ssh client (its keys, agent, config and
known_hosts): an unknown host key fails the connection, a known one is checked on every build.
`builder add` makes the node's key known, never by trusting whatever answers first: the key the
node offers (ssh-keyscan) is written to the user's known_hosts only when its fingerprint is the
one the user gave (--host-key, read off the node itself: a dockerarch card prints it on its
console at its first boot), or it is already there. A known key that differs from the one
offered is refused (another machine, or one in the middle).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from dockerarch import process
from dockerarch.errors import UsageError

KEYSCAN_TIMEOUT = 30  # seconds ssh-keyscan waits for each key (a node under TCG answers slowly)


@dataclass(frozen=True)
class HostKey:
    kind: str  # ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa
    blob: str  # base64, as in known_hosts

    @property
    def fingerprint(self) -> str:
        """OpenSSH's SHA256:... fingerprint of the key (ssh-keygen -l)."""
        digest = hashlib.sha256(base64.b64decode(self.blob)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class SshPlace:
    """Where ssh goes for an ssh:// endpoint, as the user's ssh configuration resolves it."""

    hostname: str
    port: int
    known_hosts: Path  # the first UserKnownHostsFile: where a pinned key is written

    @property
    def name(self) -> str:
        """The host's name in known_hosts: [host]:port unless the port is 22."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def parse_keys(text: str) -> list[HostKey]:
    """The keys of ssh-keyscan's output, or of known_hosts lines (marker and hosts first)."""
    keys = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0].startswith("@"):  # @cert-authority / @revoked: not a host's own key
            continue
        if len(words) >= 3 and (words[1].startswith(("ssh-", "ecdsa-", "sk-"))):
            try:
                base64.b64decode(words[2], validate=True)
            except ValueError:
                continue
            keys.append(HostKey(kind=words[1], blob=words[2]))
    return keys


def parse_ssh_config(text: str, default_port: int = 22) -> SshPlace:
    """``ssh -G``'s output: the host name, port and known_hosts file ssh will use."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        values.setdefault(key.lower(), value.strip())
    known = values.get("userknownhostsfile", "~/.ssh/known_hosts").split()[0]
    return SshPlace(hostname=values.get("hostname", ""), port=int(values.get("port", default_port)),
                    known_hosts=Path(os.path.expanduser(known)))  # fmt: skip


def ssh_place(endpoint: str) -> SshPlace:
    url = urlparse(endpoint)
    argv = ["ssh", "-G"]
    if url.port:
        argv += ["-p", str(url.port)]
    if url.username:
        argv += ["-l", url.username]
    done = process.run([*argv, "--", url.hostname or ""], timeout=30, check=False)
    if done.returncode != 0:
        raise UsageError(f"ssh cannot resolve {endpoint}: {done.stderr.strip()[-300:]}",
                         fix="Check the endpoint (ssh://USER@HOST[:PORT]) and ~/.ssh/config.")  # fmt: skip
    return parse_ssh_config(done.stdout)


def offered(place: SshPlace) -> list[HostKey]:
    """The keys the node offers now."""
    done = process.run(["ssh-keyscan", "-T", str(KEYSCAN_TIMEOUT), "-p", str(place.port),
                        place.hostname], timeout=KEYSCAN_TIMEOUT * 4, check=False)  # fmt: skip
    keys = parse_keys(done.stdout)
    if not keys:
        raise UsageError(f"No ssh server answers at {place.name}: {done.stderr.strip()[-300:]}",
                         fix="Start the node (and its ssh server) and check the endpoint's host "
                         "and port.")  # fmt: skip
    return keys


def known(place: SshPlace) -> list[HostKey]:
    """The keys known_hosts holds for the node (hashed entries too)."""
    if not place.known_hosts.is_file():
        return []
    done = process.run(["ssh-keygen", "-F", place.name, "-f", str(place.known_hosts)],
                       timeout=30, check=False)  # fmt: skip
    return parse_keys(done.stdout)


def decide(name: str, offers: list[HostKey], knows: list[HostKey],
           given: str | None) -> HostKey | None:  # fmt: skip
    """The key to write to known_hosts (None: it is there already), or a UsageError."""
    listing = ", ".join(f"{k.kind} {k.fingerprint}" for k in offers)
    if knows:
        if any(k in knows for k in offers):
            if given and given not in {k.fingerprint for k in offers}:
                raise UsageError(f"--host-key {given} is not a key {name} offers ({listing})",
                                 fix="Check the fingerprint on the node: ssh-keygen -lf "
                                 "/etc/ssh/ssh_host_ed25519_key.pub.")  # fmt: skip
            return None
        raise UsageError(
            f"{name} offers a host key other than the one your known_hosts holds for it "
            f"(offered: {listing}): another machine answers there, or one in the middle",
            fix=f"If the node was re-flashed, check its new key on the node itself, remove the "
            f"old one (ssh-keygen -R '{name}') and add the node again with --host-key.",
        )
    if given is None:
        raise UsageError(
            f"{name}'s host key is not known here, and dockerarch does not trust a key on first "
            f"use: it offers {listing}",
            fix="Check the fingerprint on the node (a dockerarch card printed 'ssh host keys "
            "made: SHA256:...' on its console at its first boot; on any machine: ssh-keygen -lf "
            "/etc/ssh/ssh_host_ed25519_key.pub) and add it again with --host-key SHA256:....",
        )
    for key in offers:
        if key.fingerprint == given:
            return key
    raise UsageError(f"--host-key {given} is not a key {name} offers ({listing})",
                     fix="Check the fingerprint on the node itself: another machine may answer "
                     "at that address.")  # fmt: skip


def pin(endpoint: str, given: str | None) -> str:
    """Make the node's host key known to ssh (``decide``); what was done, to be said."""
    place = ssh_place(endpoint)
    offers = offered(place)
    if given and given not in {k.fingerprint for k in offers}:
        # a slow sshd (an emulated board's, under load) can miss a key type within the timeout:
        # seen twice on the arm64 node bench/arm_node boots; asked once more before refusing
        offers += [k for k in offered(place) if k not in offers]
    key = decide(place.name, offers, known(place), given)
    if key is None:
        return f"host key of {place.name} already known ({place.known_hosts})"
    place.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    ends = place.known_hosts.read_bytes()[-1:] if place.known_hosts.is_file() else b"\n"
    with place.known_hosts.open("a") as hosts:
        hosts.write(
            ("" if ends in (b"\n", b"") else "\n") + f"{place.name} {key.kind} {key.blob}\n"
        )
    return f"host key of {place.name} pinned: {key.kind} {key.fingerprint} ({place.known_hosts})"
