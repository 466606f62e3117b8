"""pip's own configuration, read as pip documents it (its "Configuration" topic), so that a set
resolves, and a recipe's build fetches, where this machine's pip would: the configuration files
(global, user, site, then PIP_CONFIG_FILE's), ``[global]`` then ``[install]`` in each, then the
PIP_* environment variables, each later one overriding. Only what decides where packages come from is read:
index-url, extra-index-url, find-links, no-index.

Read with configparser rather than through ``pip config`` or pip's own classes: the file format
and the places are pip's documented interface, a subprocess per resolution is slow, and pip's
Configuration class is private.

A set fetches on this machine (sets/indexes). A recipe's build fetches inside the engine (its
sdist, its build requirements, its runtime image's dependencies): ``for_builds`` gives it the same
indexes, as the BuildKit secret ``dockerarch-index`` (never a layer, a build argument or argv).
"""

from __future__ import annotations

import configparser
import os
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dockerarch.config import is_loopback, url_host
from dockerarch.simple_api import redacted

NAME = "pip.conf"
SECTIONS = ("global", "install")  # pip's order: the command's section overrides [global]
KEYS = ("index-url", "extra-index-url", "find-links", "no-index")
TRUE = {"1", "true", "yes", "on", "y"}


@dataclass(frozen=True)
class PipConfig:
    """What pip's configuration says about where packages come from, and which files said it."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    files: tuple[Path, ...] = ()  # the configuration files read, in pip's order
    environment: tuple[str, ...] = field(default=())  # the PIP_* variables that counted

    def origin(self) -> str:
        """Where these values came from, for a progress line."""
        where = [str(p) for p in self.files] + list(self.environment)
        return ", ".join(where) or "pip's defaults"


def config_files(env: Mapping[str, str], home: Path, prefix: Path) -> list[Path]:
    """The files pip reads, lowest priority first (pip's order: global, user, site, then the
    file PIP_CONFIG_FILE names; the user's files are skipped when that file exists, none at all
    are read when it is os.devnull)."""
    named = env.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return []
    dirs = [d for d in env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":") if d]
    found = [Path(d) / "pip" / NAME for d in dirs] + [Path("/etc") / NAME]
    if not (named and Path(named).exists()):
        user = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
        found += [home / ".pip" / NAME, user / "pip" / NAME]
    found.append(prefix / NAME)
    if named:
        found.append(Path(named))
    return found


def read(env: Mapping[str, str] | None = None, home: Path | None = None,
         prefix: Path | None = None) -> PipConfig:  # fmt: skip
    """pip's configuration on this machine (``env`` etc. for tests: os.environ, ~, sys.prefix).
    A file pip could not read either (unreadable, not INI) is a clear error, as in pip."""
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    files: list[Path] = []
    paths = config_files(env, home or Path.home(), prefix or Path(sys.prefix))
    for path in paths:
        if not path.is_file():
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, UnicodeDecodeError, configparser.Error) as exc:
            from dockerarch.errors import UsageError

            raise UsageError(
                f"pip's configuration file {path} cannot be read ({type(exc).__name__}: {exc})",
                fix="Mend the file (pip refuses it too), or set PIP_CONFIG_FILE=/dev/null to "
                "resolve without pip's configuration.",
            ) from exc
        counted = False
        for section in SECTIONS:
            if parser.has_section(section):
                for key, value in parser.items(section):
                    key = key.lstrip("-").replace("_", "-")
                    if key in KEYS:
                        values[key], counted = value, True
        if counted:
            files.append(path)
    environment = []
    for key in KEYS:
        variable = "PIP_" + key.upper().replace("-", "_")
        if env.get(variable):
            values[key] = env[variable]
            environment.append(variable)
    return PipConfig(
        index_url=values.get("index-url", "").strip() or None,
        extra_index_urls=tuple(values.get("extra-index-url", "").split()),
        find_links=tuple(values.get("find-links", "").split()),
        no_index=values.get("no-index", "").strip().lower() in TRUE,
        files=tuple(files), environment=tuple(environment),
    )  # fmt: skip


def default_index() -> str:
    """The index pip uses when its configuration names none: PIP_INDEX_URL, else pip's built-in
    default. pip is a dependency for this one value: it has no public API, and dockerarch never
    writes a package registry's address itself (tests/unit/test_private_surfaces.py guards the
    import)."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    try:
        from pip._internal.models.index import PyPI

        return str(PyPI.simple_url)
    except (ImportError, AttributeError) as exc:
        from dockerarch.errors import UsageError

        raise UsageError(
            "No index to resolve from: PIP_INDEX_URL is not set, and this pip does not say its "
            f"default where dockerarch reads it ({type(exc).__name__}: {exc})",
            fix="Give --index-url URL, or set PIP_INDEX_URL.",
        ) from exc


@dataclass(frozen=True)
class BuildIndexes:
    """The indexes a recipe's build reaches from inside the engine: pip's configuration on this
    machine, what its directories cannot give (left_out), and whether one is on loopback (the
    fetching steps then run on the host's network)."""

    index_url: str
    extra_index_urls: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()  # file:// indexes and find-links: this machine's directories
    origin: str = "pip's defaults"

    @property
    def loopback(self) -> bool:
        return any(is_loopback(url_host(u)) for u in (self.index_url, *self.extra_index_urls))

    def secret(self) -> str:
        """The secret's text: the index on the first line, each extra index on a line after it
        (macros.j2's use_ca() exports them for pip and uv)."""
        return "".join(u + "\n" for u in (self.index_url, *self.extra_index_urls))

    def says(self) -> str:
        """A progress line when pip's configuration changes anything, else ''."""
        if self.origin == "pip's defaults" and not self.left_out:
            return ""
        line = f"indexes for the build, from {self.origin}: {self.index_url}"
        line += "".join(f" + {u}" for u in self.extra_index_urls)
        if self.left_out:
            line += (f"; left out ({', '.join(self.left_out)}): directories on this machine that "
                     "a build in the engine cannot read (a wheel set fetches on this machine)")  # fmt: skip
        return line


def for_builds(config: PipConfig, default: str | None = None) -> BuildIndexes:
    """What a recipe's build fetches from (``default``: default_index()). Refused, as a user
    error: an index URL with credentials (the build's own code could read them: a wheel set
    fetches on this machine instead), and no-index (a recipe's build has nothing else to fetch
    from). Directories (file:// indexes, find-links) are left out and said."""
    from dockerarch.errors import UsageError

    left_out = [*config.find_links]
    urls: list[str] = []
    for url in (config.index_url or default or default_index(), *config.extra_index_urls):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            left_out.append(url)
        elif parts.username is not None or parts.password is not None:
            raise UsageError(
                f"pip's configuration ({config.origin()}) gives the index {redacted(url)} with "
                "credentials, and a recipe's build fetches inside the engine, where the code it "
                "builds could read them",
                fix="Build it as a wheel set (dockerarch build wheel --package NAME==VERSION: a set "
                "fetches on this machine, the credentials stay in its requests), or give the "
                "build an index that needs none (PIP_INDEX_URL=URL for this command).",
            )
        elif url not in urls:
            urls.append(url)
    if config.no_index:
        raise UsageError(
            f"pip's configuration ({config.origin()}) says no-index, and a recipe's build fetches "
            "its sources and build requirements from an index",
            fix="Set PIP_NO_INDEX=0 for this command, or build a wheel set from --find-links "
            "directories (dockerarch build wheel -r FILE --find-links DIR).",
        )
    if not urls:  # the only index was a directory
        raise UsageError(
            f"pip's configuration ({config.origin()}) names only directories on this machine "
            f"({', '.join(left_out)}), which a recipe's build in the engine cannot read",
            fix="Set PIP_INDEX_URL to an index the engine reaches for this command, or build a "
            "wheel set (dockerarch build wheel -r FILE), which fetches on this machine.",
        )
    return BuildIndexes(index_url=urls[0], extra_index_urls=tuple(urls[1:]),
                        left_out=tuple(left_out), origin=config.origin())  # fmt: skip
