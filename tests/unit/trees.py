"""Source trees for recipes that build only from one (recipe.yaml `needs_source`): an empty tree
holding the recipe's marker files, made once per test run."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from dockerarch.recipes import Recipe

_MADE: dict[str, str] = {}


def source_for(recipe: Recipe) -> str | None:
    """``--source`` for ``recipe`` when it needs one (None otherwise)."""
    if not recipe.needs_source:
        return None
    if recipe.name not in _MADE:
        tree = Path(tempfile.mkdtemp(prefix=f"dockerarch-{recipe.name}-tree-"))
        atexit.register(shutil.rmtree, tree, True)
        for marker in recipe.source_markers:
            (tree / marker).parent.mkdir(parents=True, exist_ok=True)
            (tree / marker).touch()
        _MADE[recipe.name] = str(tree)
    return _MADE[recipe.name]
