"""Where dockerarch finds its own files and a user's project files.

Everything dockerarch ships is found through ``importlib.resources``:

- ``dockerarch/data/``: the built-in targets, the default registry configuration and the hybrid
  toolchain's helper files;
- the built-in recipes: ``dockerfiles/`` and ``contexts/``, which sit at the top of the source
  repository and which the wheel carries as ``dockerarch/_builtin/dockerfiles`` and
  ``dockerarch/_builtin/contexts`` (pyproject.toml maps them). An editable install of the
  checkout has no ``_builtin/``: its recipes are the checkout's own top-level folders.

A user's project (the working directory, or ``$DOCKERARCH_PROJECT``) may hold its own
``dockerfiles/`` and ``contexts/``: its recipes and partials come first, so they override
built-in ones of the same name.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

from dockerarch.errors import ConfigError

BUILTIN_KINDS = ("dockerfiles", "contexts")


def _package_dir() -> Path:
    # A regular (unzipped) install: every installer pip, pipx and uv use gives one.
    return Path(str(resources.files("dockerarch")))


def data_path(*parts: str) -> Path:
    """A file or folder under the package's ``data/`` (targets.yaml, registry.yaml, toolchain/)."""
    return _package_dir().joinpath("data", *parts)


@functools.cache
def builtin_root() -> Path:
    """The folder holding the built-in ``dockerfiles/`` and ``contexts/``."""
    package = _package_dir()
    for root in (package / "_builtin", package.parent):  # an installed wheel; the checkout
        if all((root / kind).is_dir() for kind in BUILTIN_KINDS):
            return root
    raise ConfigError(
        f"The built-in recipes (dockerfiles/ and contexts/) are missing from the dockerarch "
        f"installation at {package}",
        fix="Reinstall dockerarch from its wheel or sdist (pipx install dockerarch-*.whl), or from "
        "its source checkout (pip install -e .).",
    )


def project_root() -> Path:
    return Path(os.environ.get("DOCKERARCH_PROJECT") or Path.cwd()).resolve()


def _dirs(kind: str) -> list[Path]:
    builtin = builtin_root() / kind
    own = project_root() / kind
    return [own, builtin] if own.is_dir() and own.resolve() != builtin.resolve() else [builtin]


def template_dirs() -> list[Path]:
    return _dirs("dockerfiles")


def context_dirs() -> list[Path]:
    return _dirs("contexts")
