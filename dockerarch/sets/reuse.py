"""A member's build result: taken into the set once it is proven to be the member (its wheel's
name and version those the lock pins), and reused on a later run only when it was made as this
build would make it.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from dockerarch import simple_api
from dockerarch.build import JobResult, Progress
from dockerarch.buildsteps import BuildOptions
from dockerarch.errors import DockerarchError
from dockerarch.files import sha256_file
from dockerarch.sets.errors import ResolutionError
from dockerarch.sets.metadata import wheel_metadata
from dockerarch.sets.model import Member, SetBuildFailed, TargetSet, needed_by
from dockerarch.sets.resolver import same_distribution, says_it_is

PARALLELISM = ("MAX_JOBS",)  # options that change how fast a build runs, never what it makes


def previous_result(out: Path, made: TargetSet, member: Member, accel: str, *,
                    base_id: str | None) -> tuple[Path, dict[str, object], Path] | None:  # fmt: skip
    """A result of this package's build for this target made as this build would make it, still
    the file it verified: (directory, manifest, wheel). The same sdist (sha256), build
    environment (every pin), options, acceleration mode, dockerarch version and target base
    (``base_id``, the engine's; None: none there yet, so nothing is reused): after numpy 1 -> 2
    in its build environment, another --set, or a base bootstrapped or imported again, the
    member is built again."""
    candidate = member.node.candidate
    name = canonicalize_name(candidate.name).replace("-", "_")
    directory = out / made.target / f"{name}-{candidate.version}"
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    record = manifest.get("wheelset") or {}
    sdist = record.get("sdist") or {}
    if sdist.get("sha256") != candidate.file.sha256 or not candidate.file.sha256:
        return None
    if record.get("wheel_only"):
        return None  # built before what it needs was known: built again, with them
    from dockerarch import __version__

    def made_with(options: object) -> dict[str, object]:
        given = options if isinstance(options, dict) else {}
        return {k: str(v) for k, v in given.items() if k not in PARALLELISM}

    if (record.get("build_env") != sorted(member.node.build_env.values())
            or record.get("accel") != accel or manifest.get("dockerarch") != __version__
            or made_with(manifest.get("options")) != made_with(dict(made.request.options))):  # fmt: skip
        return None
    base = manifest.get("base")
    if base_id is None or not isinstance(base, dict) or base.get("id") != base_id:
        return None
    for artifact in manifest.get("artifacts", []):
        path = directory / str(artifact.get("name"))
        if (
            artifact.get("kind") == "wheel"
            and path.is_file()
            and sha256_file(path) == artifact.get("sha256")
        ):
            return directory, manifest, path
    return None


def reuse(made: TargetSet, member: Member, options: BuildOptions, progress: Progress) -> bool:
    from dockerarch import engine

    base = engine.image_labels(made.request.target.base_image)
    found = previous_result(options.out, made, member, options.accel,
                            base_id=base[0] if base else None)  # fmt: skip
    if found is None:
        return False
    member.result, member.record, member.path = found
    member.reused = True
    progress.say(made.target, f"set: {member.key} already built ({member.result})")
    return True


def take(member: Member, result: JobResult, accel: str) -> None:
    """A finished build's wheel into the member, and the sdist it came from into its
    manifest.json (what a re-run compares)."""
    from dockerarch.files import write_atomic

    error = result.error
    wheels = [p for p in result.artifacts if p.name.endswith(".whl")]
    if error is None:
        assert result.directory is not None and wheels
        try:
            _made_the_member(member, wheels[0])
        except ResolutionError as exc:
            error = exc
    if error is not None:
        step = getattr(error, "step", None)
        member.error = SetBuildFailed(
            f"{member.key} could not be built for {result.target} (needed by "
            f"{needed_by(member)}): " + ("its build failed" if step else error.problem),
            fix=(error.fix or "See its build log.")
            + " The rest of the set is kept; run the same command again to build what is missing.",
        )
        member.error.tail = tuple(getattr(error, "tail", None) or ())[-15:]
        member.error.log = result.log
        member.error.__cause__ = error
        return
    assert result.directory is not None
    manifest_path = result.directory / "manifest.json"
    record = json.loads(manifest_path.read_text())
    file = member.node.candidate.file
    record["wheelset"] = {
        "sdist": {
            "file": file.filename,
            "url": simple_api.redacted(file.url),
            "sha256": file.sha256,
        },
        "build_env": sorted(member.node.build_env.values()),
        "accel": accel,  # the mode asked for (reuse: previous_result)
        # built before what it needs was known (no runtime image): never reused as a result
        "wheel_only": member.node.learn,
    }
    write_atomic(manifest_path, (json.dumps(record, indent=2) + "\n").encode())
    member.result, member.record, member.path = result.directory, record, wheels[0]


def _made_the_member(member: Member, wheel: Path) -> None:
    """The wheel a member's build made is the member: its file name and its METADATA name the
    project and version the lock pins (an sdist's setup.py can build anything)."""
    what = f"The wheel {wheel.name} its build made"
    try:
        name, version = (str(p) for p in parse_wheel_filename(wheel.name)[:2])
    except InvalidWheelFilename:
        name, version = wheel.name, ""
    same_distribution(member.node.candidate, name, version, f"{what} (its file name)")
    try:
        metadata: bytes | None = wheel_metadata(wheel).as_bytes()
    except (OSError, zipfile.BadZipFile, DockerarchError):
        metadata = None
    same_distribution(member.node.candidate, *says_it_is(metadata), what)
