"""Known fixes to published sdists, applied by a wheel set before a member is built (the opencv
recipe's template applies the same replacement with sed, in its sources stage; a unit test keeps
the two the same). Each fix is one
exact text replacement in one file, checked: a release the fix no longer fits is said, never
built unpatched.

opencv-python (all four distributions): its setup.py lets the G-API files be missing (G-API's ADE
dependency is downloaded from GitHub while cmake configures; offline, G-API is left out) but not
the typing stubs, whose generator then fails on G-API's types: the wheel would fail at its very
end, after the whole compile ("Not found: 'python/cv2/py.typed'"). The fix lets them be missing
too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from dockerarch.errors import DockerarchError


@dataclass(frozen=True)
class Fix:
    file: str  # relative to the sdist's top directory
    old: str
    new: str
    why: str


OPENCV_TYPING = Fix(
    file="setup.py",
    old='if not found and "gapi" not in relpath_re:',
    new='if not found and not any(n in relpath_re for n in ("gapi", "py.typed", "/typing/")):',
    why="the typing stubs may be missing, as G-API's files may (offline builds leave G-API out)",
)
OPENCV = ("opencv-python", "opencv-python-headless", "opencv-contrib-python",
          "opencv-contrib-python-headless")  # fmt: skip
FIXES: dict[str, tuple[Fix, ...]] = {name: (OPENCV_TYPING,) for name in OPENCV}


class FixFailed(DockerarchError):
    """A known fix does not fit the sdist any more."""

    exit_code = 6


def apply(name: str, version: str, tree: Path) -> list[str]:
    """The fixes known for ``name`` applied to its unpacked sdist at ``tree``; what was done."""
    done = []
    for fix in FIXES.get(canonicalize_name(name), ()):
        path = tree / fix.file
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if text.count(fix.old) != 1:
            raise FixFailed(
                f"{name} {version}'s {fix.file} no longer has the line dockerarch fixes "
                f"({fix.why}): {fix.old!r}",
                fix=f"Build a version the fix fits, or check what {name} {version} does about it "
                "and update dockerarch/sdistfix.py.",
            )
        path.write_text(text.replace(fix.old, fix.new), encoding="utf-8")
        done.append(f"{fix.file}: {fix.why}")
    return done
