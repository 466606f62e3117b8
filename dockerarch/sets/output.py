"""The set written: OUT/<target>/sets/<name>/ with the board's wheels, the hashed lock
(requirements.txt) and manifest.json, renamed into place only once its check passed.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from dockerarch import simple_api
from dockerarch.files import context_name, link_or_copy, make_work_dir, replace_dir, sha256_file
from dockerarch.pyreqs import Wants
from dockerarch.sets.model import SETS, TargetSet


def lock_lines(made: TargetSet) -> list[str]:
    """requirements.txt: every run-time member pinned with its file's sha256."""
    lines = [f"# The wheel set for {made.target} ({made.request.target.platform}, Python "
             f"{made.request.target.python}), written by dockerarch. On the board:",
             "#   pip install --no-index --find-links DIR --only-binary :all: --require-hashes -r requirements.txt"]  # fmt: skip
    for member in sorted(made.members.values(), key=lambda m: m.node.candidate.name):
        if not member.node.runtime or member.path is None:
            continue
        digest = sha256_file(member.path)
        lines.append(f"{member.node.candidate.name}=={member.node.candidate.version} \\")
        lines.append(f"    --hash=sha256:{digest}")
    return lines


def write_set(made: TargetSet, out: Path, name: str, wants: Wants,
              check: Callable[[Path], None] | None = None) -> Path:  # fmt: skip
    """OUT/<target>/sets/<name>/: the board's wheels, requirements.txt (hashed), manifest.json
    and the check's log, written beside and renamed into place only once ``check`` (given the
    directory as it is made) passed: a set that fails it replaces no earlier one."""
    parent = out / made.target / SETS
    parent.mkdir(parents=True, exist_ok=True)
    work = make_work_dir(parent, name)
    landing = work / context_name("set", work)  # the check's `wheelset` context: its own name
    landing.mkdir()
    entries = []
    needs: set[str] = set()
    for member in sorted(made.members.values(), key=lambda m: m.node.candidate.name):
        candidate = member.node.candidate
        assert member.path is not None
        if member.node.runtime:
            link_or_copy(member.path, landing / member.path.name)
        record = member.record or {}
        needs.update(str(p) for p in record.get("needs_apt") or [])  # type: ignore[attr-defined]
        entries.append({
            "name": candidate.name, "version": str(candidate.version),
            "file": member.path.name, "sha256": sha256_file(member.path),
            "how": "built" if member.built else "fetched",
            "runtime": member.node.runtime,
            "needed_by": sorted(member.node.needed_by),
            "requires": sorted(member.node.requires),
            **({"from": simple_api.redacted(candidate.file.url), "index_sha256": candidate.file.sha256}
               if not member.built else {
                   "sdist": {"file": candidate.file.filename, "url": simple_api.redacted(candidate.file.url),
                             "sha256": candidate.file.sha256},
                   "build_env": sorted(member.node.build_env.values()),
                   "sdist_fixes": member.fixed,
                   "result": str(member.result), "reused": member.reused,
                   "build": {k: record.get(k) for k in ("seconds", "hybrid", "accel", "needs_apt",
                                                        "smoke", "options", "base")},
               }),
        })  # fmt: skip
    made.needs_apt = sorted(needs)
    (landing / "requirements.txt").write_text("\n".join(lock_lines(made)) + "\n")
    try:
        if check is not None:
            check(landing)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    manifest = {
        "set": name,
        "target": made.target,
        "platform": made.request.target.platform,
        "python": made.request.target.python,
        "requirements": [f"{w.requirement} ({w.where})" for w in wants.requirements],
        "constraints": [f"{w.requirement} ({w.where})" for w in wants.constraints],
        "build_constraints": [f"{w.requirement} ({w.where})" for w in wants.build_constraints],
        "no_binary": sorted(wants.no_binary),
        "indexes": made.indexes.urls,  # asked in this order (see Indexes.described)
        "find_links": [str(d) for d in made.indexes.find_links],
        "build_order": made.order,
        "distributions": entries,
        "needs_apt": made.needs_apt,
        "installed_check": made.check,
        "image": made.image,  # the set installed and checked, for export-rootfs/export-img -r
        "tests": made.tests,
        "fetched": sum(1 for e in entries if e["how"] == "fetched"),
        "built": sum(1 for e in entries if e["how"] == "built"),
        "size": sum((landing / str(e["file"])).stat().st_size for e in entries if e["runtime"]),
        "seconds": round(time.monotonic() - made.started, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (landing / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    final = parent / name
    replace_dir(landing, final)
    shutil.rmtree(work, ignore_errors=True)
    made.directory = final
    return final
