"""The host's apt configuration: where its Debian mirror is.

dockerarch never writes a mirror's host name into the repository: the Debian mirror used for
bootstraps and for the packages ``scripts/setup-host`` installs comes from the host's own
``/etc/apt/sources.list.d/*.sources`` (deb822) or ``sources.list`` (one-line) entries.

Standard library only: ``scripts/setup-host`` runs this module with the system Python before
dockerarch and its dependencies are installed (``python3 -m dockerarch.hostapt --help``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dockerarch.errors import ConfigError, DockerarchError

DEBIAN_CODENAMES = ("buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid")
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


@dataclass(frozen=True, kw_only=True)
class AptSource:
    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None = None
    origin: str = field(default="", compare=False)  # the file it came from


def parse_deb822(text: str, origin: str = "") -> list[AptSource]:
    sources = []
    for stanza in _stanzas(text):
        if stanza.get("enabled", "yes").lower() == "no":
            continue
        sources.append(
            AptSource(
                types=tuple(stanza.get("types", "").split()),
                uris=tuple(stanza.get("uris", "").split()),
                suites=tuple(stanza.get("suites", "").split()),
                components=tuple(stanza.get("components", "").split()),
                signed_by=stanza.get("signed-by") or None,
                origin=origin,
            )
        )
    return sources


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = None
    for raw in text.splitlines():
        if raw.lstrip().startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
        elif raw[0] in " \t" and key is not None:
            current[key] += "\n" + raw.strip()  # continuation line (an inline keyring)
        elif ":" in raw:
            name, value = raw.split(":", 1)
            key = name.strip().lower()
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def parse_one_line(text: str, origin: str = "") -> list[AptSource]:
    """``deb [signed-by=/k.gpg arch=amd64] URI SUITE COMPONENT...`` lines."""
    sources = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith(("deb ", "deb-src ", "deb\t")):
            continue
        kind, rest = line.split(None, 1)
        options: dict[str, str] = {}
        if rest.startswith("["):
            opts, rest = rest[1:].split("]", 1)
            for opt in opts.split():
                if "=" in opt:
                    k, v = opt.split("=", 1)
                    options[k.lower()] = v
        words = rest.split()
        if len(words) < 2:
            continue
        sources.append(
            AptSource(
                types=(kind,),
                uris=(words[0],),
                suites=(words[1],),
                components=tuple(words[2:]),
                signed_by=options.get("signed-by"),
                origin=origin,
            )
        )
    return sources


def read_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    sources: list[AptSource] = []
    main_list = etc_apt / "sources.list"
    if main_list.is_file():
        sources += parse_one_line(main_list.read_text(), str(main_list))
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".sources":
                sources += parse_deb822(path.read_text(), str(path))
            elif path.suffix == ".list":
                sources += parse_one_line(path.read_text(), str(path))
    return sources


@dataclass(frozen=True)
class DebianMirror:
    uri: str
    keyring: str
    suite: str  # the host's own release codename, as its sources name it


def debian_mirror(sources: list[AptSource]) -> DebianMirror:
    """The host's Debian archive mirror: a ``deb`` source carrying a Debian release codename
    (not its -security or -updates suites). Raises ConfigError when there is none."""
    for source in sources:
        if "deb" not in source.types or Path(source.origin).name.startswith("dockerarch-"):
            continue  # skip what setup-host itself added
        releases = [s for s in source.suites if s in DEBIAN_CODENAMES]
        if not releases or not source.uris:
            continue
        uri = source.uris[0].rstrip("/")
        if uri.endswith("-security") or "/debian-security" in uri:
            continue
        keyring = source.signed_by if source.signed_by and "\n" not in source.signed_by else None
        return DebianMirror(uri=uri, keyring=keyring or DEBIAN_KEYRING, suite=releases[0])
    raise ConfigError(
        "No Debian archive mirror found in the host's apt sources (/etc/apt/sources.list and "
        "/etc/apt/sources.list.d)",
        fix="Add the Debian mirror you use there, or pass --mirror URI explicitly.",
    )


def suite_sources(mirror: DebianMirror, suite: str) -> str:
    """A deb822 stanza that adds ``suite`` from the same mirror, signed by the same keyring."""
    return (
        "# Written by dockerarch scripts/setup-host: Docker engine and buildx packages from\n"
        f"# Debian {suite}, pinned low in /etc/apt/preferences.d so nothing else upgrades.\n"
        "Types: deb\n"
        f"URIs: {mirror.uri}\n"
        f"Suites: {suite}\n"
        "Components: main\n"
        f"Signed-By: {mirror.keyring}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m dockerarch.hostapt",
        description="Print what the host's apt configuration says about its Debian mirror.",
    )
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("mirror", help="the Debian mirror URI")
    sub.add_parser("codename", help="the host's Debian release as its sources name it")
    stanza = sub.add_parser("suite-sources", help="a deb822 stanza adding SUITE from that mirror")
    stanza.add_argument("suite")
    parser.add_argument("--etc-apt", type=Path, default=Path("/etc/apt"))
    args = parser.parse_args(argv)
    try:
        mirror = debian_mirror(read_sources(args.etc_apt))
    except DockerarchError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    if args.what == "mirror":
        print(mirror.uri)
    elif args.what == "codename":
        print(mirror.suite)
    else:
        sys.stdout.write(suite_sources(mirror, args.suite))
    return 0


if __name__ == "__main__":
    sys.exit(main())
