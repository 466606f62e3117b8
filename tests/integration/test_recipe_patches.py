"""Every recipe patch applies with no fuzz, as the build applies it (`patch -p1 --fuzz=0`), to a
small tree holding the lines it patches, and gives the lines it promises; applied twice, it is
refused. The real trees are patched in the recorded builds (bench/results)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from dockerarch.recipes import load_recipes

PATCHES = [
    (recipe.name, recipe.context / "patches" / name)
    for recipe in load_recipes().values()
    for names in recipe.patches.values()
    for name in names
]


def _sides(patch: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Per file: the lines before (context and removed) and after (context and added)."""
    sides: dict[str, tuple[list[str], list[str]]] = {}
    current = None
    for line in patch.read_text().splitlines():
        if line.startswith("+++ b/"):
            current = sides.setdefault(line[6:], ([], []))
        elif current is None or line.startswith(("--- ", "@@")):
            continue
        elif line.startswith("-"):
            current[0].append(line[1:])
        elif line.startswith("+"):
            current[1].append(line[1:])
        elif line.startswith(" "):
            current[0].append(line[1:])
            current[1].append(line[1:])
    return sides


@pytest.mark.parametrize(("recipe", "patch"), PATCHES, ids=[p.name for _, p in PATCHES])
def test_a_recipe_patch_applies_exactly(recipe: str, patch: Path, tmp_path: Path) -> None:
    sides = _sides(patch)
    assert sides, f"{patch} patches no file"
    for name, (before, _) in sides.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        # the patched lines where the file's hunk says they are, after as many lines of their own
        hunks = patch.read_text().split(f"+++ b/{name}\n", 1)[1]
        first = int(re.search(r"^@@ -(\d+)", hunks, re.M).group(1))  # type: ignore[union-attr]
        path.write_text(
            "".join(f"// line {n}\n" for n in range(1, first)) + "\n".join(before) + "\n"
        )
    argv = ["patch", "-p1", "--forward", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(patch)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for name, (_, after) in sides.items():
        assert (tmp_path / name).read_text().splitlines()[-len(after) :] == after
    again = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert again.returncode != 0  # --forward: a tree patched already is not patched twice
