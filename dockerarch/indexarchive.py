"""A static package index per board target, for boards that reach no index server: the tree
pip reads with --index-url file://... or any web server serves as is (PEP 503 and PEP 691 pages,
sha256 in every link, PEP 658 metadata beside each wheel, the board's apt packages on the page)."""

from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from dockerarch.errors import OutputError
from dockerarch.files import sha256_file, write_atomic
from dockerarch.indexclient import wheel_metadata
from dockerarch.pkgindex import Wheel, gate

Say = Callable[[str], None]


@dataclass(frozen=True)
class Archived:
    path: Path
    wheel: Wheel
    added: bool


def archive(wheels: list[Wheel], directory: Path, say: Say) -> list[Archived]:
    """A static index per target under ``directory``: <target>/simple/index.html (and
    index.json, PEP 691), <target>/simple/<project>/ with each wheel, its PEP 658 .metadata and
    both pages, sha256 in every link. Served by any web server as is, or used by pip directly
    (--index-url file://DIRECTORY/<target>/simple/). Files already there stay as they are; a
    different file under a name already there is refused before anything is written."""
    for wheel in wheels:
        gate(wheel)
    for wheel in wheels:
        there = directory / wheel.target.name / "simple" / wheel.project / wheel.path.name
        if there.is_file() and sha256_file(there) != wheel.sha256:
            raise OutputError(
                f"{there} holds another file under this name; an index never changes a "
                "published file, and nothing was written",
                fix="Archive into a new directory, or publish a new version.",
            )
    results = []
    for wheel in wheels:
        project_dir = directory / wheel.target.name / "simple" / wheel.project
        project_dir.mkdir(parents=True, exist_ok=True)
        final = project_dir / wheel.path.name
        added = not final.is_file()
        if added:
            with tempfile.NamedTemporaryFile(dir=project_dir, prefix=".tmp-", delete=False) as tmp:
                with open(wheel.path, "rb") as source:
                    shutil.copyfileobj(source, tmp)
            os.replace(tmp.name, final)
            os.chmod(final, 0o644)
            write_atomic(project_dir / f"{wheel.path.name}.metadata", wheel_metadata(final))
            if wheel.needs_apt:  # what the board installs with apt first, shown on the pages
                write_atomic(project_dir / f"{wheel.path.name}.needs-apt",
                             "".join(f"{p}\n" for p in wheel.needs_apt).encode())  # fmt: skip
        _write_project_pages(project_dir)
        _write_root_pages(directory / wheel.target.name / "simple")
        say(f"{wheel.target.name}: {'added' if added else 'already there, the same file:'} "
            f"{final}")  # fmt: skip
        results.append(Archived(final, wheel, added))
    return results


def _write_project_pages(project_dir: Path) -> None:
    project = project_dir.name
    files: list[dict[str, Any]] = []
    for path in sorted(project_dir.glob("*.whl")):
        metadata = project_dir / f"{path.name}.metadata"
        needs = project_dir / f"{path.name}.needs-apt"
        files.append({
            "filename": path.name,
            "url": path.name,
            "hashes": {"sha256": sha256_file(path)},
            "size": path.stat().st_size,  # PEP 700 (API 1.1)
            **({"core-metadata": {"sha256": sha256_file(metadata)}} if metadata.is_file() else {}),
            **({"_needs_apt": needs.read_text().split()} if needs.is_file() else {}),
        })  # fmt: skip
    anchors = "\n".join(
        f'    <a href="{html.escape(f["url"])}#sha256={f["hashes"]["sha256"]}"'
        + (f' data-core-metadata="sha256={f["core-metadata"]["sha256"]}"'
           f' data-dist-info-metadata="sha256={f["core-metadata"]["sha256"]}"'
           if "core-metadata" in f else "")
        + f">{html.escape(f['filename'])}</a>"
        + (f" (on the board first: apt install {html.escape(' '.join(f['_needs_apt']))})"
           if "_needs_apt" in f else "")
        + "<br/>"
        for f in files
    )  # fmt: skip
    page = (f'<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" '
            f'content="1.1"><title>Links for {project}</title></head>\n  <body>\n'
            f"    <h1>Links for {project}</h1>\n{anchors}\n  </body>\n</html>\n")  # fmt: skip
    write_atomic(project_dir / "index.html", page.encode())
    # PEP 700's versions: every version the project's files have (API 1.1 requires it)
    versions = sorted({str(parse_wheel_filename(f["filename"])[1]) for f in files}, key=Version)
    body = {"meta": {"api-version": "1.1"}, "name": project, "versions": versions, "files": files}
    write_atomic(project_dir / "index.json", (json.dumps(body, indent=2) + "\n").encode())


def _write_root_pages(simple: Path) -> None:
    projects = sorted(
        p.name for p in simple.iterdir() if p.is_dir() and (p / "index.html").is_file()
    )
    anchors = "\n".join(f'    <a href="{p}/">{p}</a><br/>' for p in projects)
    page = (f'<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" '
            f'content="1.1"><title>Simple index</title></head>\n  <body>\n{anchors}\n'
            "  </body>\n</html>\n")  # fmt: skip
    write_atomic(simple / "index.html", page.encode())
    body = {"meta": {"api-version": "1.1"}, "projects": [{"name": p} for p in projects]}
    write_atomic(simple / "index.json", (json.dumps(body, indent=2) + "\n").encode())


def board_lines(wheels: list[Wheel], directory: Path, locks: dict[str, Path]) -> list[str]:
    """What a board of each target runs to install from the archive (with a wheel set's lock
    file: --require-hashes -r)."""
    lines = []
    for name in sorted({w.target.name for w in wheels}):
        simple = (directory / name / "simple").resolve()
        needs = sorted({p for w in wheels if w.target.name == name for p in w.needs_apt})
        if needs:
            lines.append(f"on a {name} board: apt install {' '.join(needs)}")
        what = f"--require-hashes -r {locks[name]}" if name in locks else "..."
        lines.append(f"on a {name} board: pip install --index-url file://{simple}/ "
                     f"--only-binary :all: {what} (or serve the directory with any web server)")  # fmt: skip
    return lines
