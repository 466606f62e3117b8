"""pip's own configuration, read as pip documents it (its "Configuration" topic), so that a set
resolves where this machine's pip would: the configuration files (global, user, site, then
PIP_CONFIG_FILE's), ``[global]`` then ``[install]`` in each, then the PIP_* environment
variables, each later one overriding. Only what decides where packages come from is read:
index-url, extra-index-url, find-links, no-index.

Read with configparser rather than through ``pip config`` or pip's own classes: the file format
and the places are pip's documented interface, a subprocess per resolution is slow, and pip's
Configuration class is private.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

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
