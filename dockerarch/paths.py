"""Where dockerarch finds its templates and build contexts.

The built-in recipes live beside the package in its source checkout (``dockerfiles/`` and
``contexts/``, installed editable by scripts/setup-host). A user's project (the working
directory, or ``$DOCKERARCH_PROJECT``) may hold its own ``dockerfiles/`` and ``contexts/``: its
recipes and partials come first, so they override built-in ones of the same name.
"""

from __future__ import annotations

import os
from pathlib import Path

from dockerarch.errors import ConfigError

BUILTIN_ROOT = Path(__file__).resolve().parent.parent


def project_root() -> Path:
    return Path(os.environ.get("DOCKERARCH_PROJECT") or Path.cwd()).resolve()


def _dirs(kind: str) -> list[Path]:
    builtin = BUILTIN_ROOT / kind
    if not builtin.is_dir():
        raise ConfigError(
            f"The built-in {kind}/ directory is missing beside the dockerarch package ({builtin})",
            fix="Install dockerarch from its source checkout (scripts/setup-host does: "
            "pip install -e .).",
        )
    own = project_root() / kind
    return [own, builtin] if own.is_dir() and own.resolve() != builtin else [builtin]


def template_dirs() -> list[Path]:
    return _dirs("dockerfiles")


def context_dirs() -> list[Path]:
    return _dirs("contexts")
