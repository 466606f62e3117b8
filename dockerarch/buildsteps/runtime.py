"""The steps that prove an artifact on its target: the runtime image (the artifacts installed
with the libraries they need) and the smoke test under QEMU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from dockerarch import (
    artifacts,
    libneeds,
)
from dockerarch.artifacts import VerificationError
from dockerarch.buildsteps.state import JobState, SmokeFailed, stream
from dockerarch.engine import BuildSpec
from dockerarch.files import context_name
from dockerarch.render import RenderRequest


def image_tag(request: RenderRequest, target: str) -> str:
    """The runtime image's tag: dockerarch/<name>:<version>-<target>."""
    tag = f"dockerarch/{request.result_name.rsplit('-', 1)[0]}:{request.version}-{target}"
    return re.sub(r"[^a-z0-9_./:-]", "-", tag.lower())


def runtime_image(job: JobState) -> None:
    """The runtime stage from exactly the verified files (the named context `artifacts` in place
    of the stage: nothing of the build stage is resolved again), loaded into the engine."""
    if not job.options.smoke or job.request.wheel_only:
        return
    request = job.request
    job.image_tag = image_tag(request, job.target)
    verified = _verified_copy(job.landing, job.reports, job.work)
    known = _runtime_packages(job)
    contexts = {**job.contexts, "artifacts": str(verified)}
    listed = _needs_files(job)
    if listed is not None:  # a hybrid build's runtime stage checks the libraries itself
        contexts["needs-files"] = str(listed)
    spec = BuildSpec(
        context_dir=job.context, platform=request.target.platform, stage="runtime",
        load_tag=job.image_tag, secrets=job.secrets, cache=True, allow=job.allow,
        node_context=job.route.context, build_contexts=contexts,
        build_args={"DOCKERARCH_NEEDS": " ".join(known)} if known else None,
    )  # fmt: skip
    if request.runtime_needs:
        job.say(f"runtime image: with {' '.join(request.runtime_needs)}, which the set's wheels "
                "installed with it need")  # fmt: skip
    missing = _missing_libraries(job, spec, _built(job, spec))
    if missing:
        job.needs_apt = libneeds.packages_for(missing, job.sonames, job.target)
        sonames = ", ".join(sorted({m.soname for m in missing}))
        job.say(f"the artifacts need {sonames}, which the base lacks: installing "
                f"{' '.join(job.needs_apt)} in the runtime image")  # fmt: skip
        known = _runtime_packages(job)
        spec = dataclasses.replace(spec, build_args={"DOCKERARCH_NEEDS": " ".join(known)})
        still = _missing_libraries(job, spec, _built(job, spec))
        if still:
            raise VerificationError(
                f"{still[0].path} still cannot find {still[0].soname} in {job.image_tag} after "
                f"installing {' '.join(known)}",
                fix="See build.log; the package that shipped it in the build stage does not put "
                "it where the loader looks at run time.",
            )
    if known:
        job.say(f"on a board: apt install {' '.join(known)}")
    found = job.engine.image_labels(job.image_tag, job.route.context)
    job.image_id = found[0] if found else None


def _built(job: JobState, spec: BuildSpec) -> str | None:
    """The runtime image built; the libraries check's report its step printed, if it did."""
    lines: list[str] = []
    stream(job, spec, "runtime image",
           lambda line: lines.append(line) if "dockerarch-needs" in line else None)  # fmt: skip
    return libneeds.report_in_log(lines)


def _runtime_packages(job: JobState) -> list[str]:
    """The target's packages the runtime image installs before the artifacts: those the set's
    wheels installed with them need (their builds found them), and the artifacts' own."""
    return sorted({*job.request.runtime_needs, *job.needs_apt})


def _needs_files(job: JobState) -> Path | None:
    """A hybrid build's files.json of the native libraries check (a directory for the named
    context `needs-files`); None for other builds and when there is no ELF file to check."""
    if job.request.toolchain is None:
        return None
    files = libneeds.native_files(installed(job))
    if files is None:
        return None
    work = Path(tempfile.mkdtemp(prefix="needs-", dir=job.work))
    listed = work / context_name("files", work)
    listed.mkdir()
    (listed / "files.json").write_text(files)
    return listed


def _missing_libraries(
    job: JobState, runtime: BuildSpec, report: str | None
) -> list[libneeds.Missing]:
    """Every needed library of the installed artifacts that the target's loader does not find
    in the runtime image: read natively in a hybrid build (``report``, which the runtime stage's
    step printed, or else its `needs` stage), else, or when that reading cannot answer, by the
    target's ldd under QEMU."""
    if job.request.toolchain is not None:
        found = _missing_natively(job, runtime, report)
        if found is not None:
            return found
    command = libneeds.check_command(installed(job))
    if command is None or job.image_tag is None:
        return []
    code, output = job.engine.run_in_image(
        job.image_tag, job.request.target.platform, command, job.route.context, SMOKE_TIMEOUT
    )
    job.log.write(f"### shared libraries: {command}\n{output}\n")
    if code != 0:
        raise SmokeFailed(
            f"{job.target}: checking the artifacts' shared libraries in {job.image_tag} failed "
            f"(exit code {code}): " + " / ".join(output.strip().splitlines()[-3:]),
            fix="See build.log.",
        )
    return libneeds.parse(output, installed(job))


def _missing_natively(
    job: JobState, runtime: BuildSpec, report: str | None
) -> list[libneeds.Missing] | None:
    """The check of _missing_libraries by the x86-64 Python over the runtime image's files:
    ``report`` when the runtime stage's step printed it, else the layout's `needs` stage (FROM
    the runtime stage just built: its steps come from the cache); None when that reading cannot
    answer for these files."""
    listed = (runtime.build_contexts or {}).get("needs-files")
    if listed is None:
        return []  # no ELF file
    files = (Path(listed) / "files.json").read_text()
    if report is None:
        work = Path(listed).parent
        spec = dataclasses.replace(runtime, stage="needs", load_tag=None, output_dir=work / "out")
        started = time.monotonic()
        stream(job, spec, "shared libraries")
        report = (work / "out" / "dockerarch-needs.txt").read_text(errors="replace")
        job.log.write(f"### shared libraries, read natively in {job.image_tag} "
                      f"({time.monotonic() - started:.1f} s):\n{files}{report}\n")  # fmt: skip
    else:
        job.log.write(f"### shared libraries, read natively in {job.image_tag} by its last "
                      f"step:\n{files}{report}\n")  # fmt: skip
    why = libneeds.undecided(report)
    if why is not None:
        job.say(f"the artifacts' libraries cannot be read natively ({why}): asking the "
                "target's ldd")  # fmt: skip
        return None
    return libneeds.parse(report, installed(job))


def installed(job: JobState) -> list[artifacts.ArtifactReport]:
    """What the runtime image's checks cover: the artifacts, and the wheels a wheel set's member
    installs with them (RenderRequest.installed_with: the rest of the set)."""
    return [*job.reports, *job.request.installed_with]


def smoke_test(job: JobState) -> None:
    """The recipe's smoke command (a wheel's: import its top-level modules) in the runtime image,
    under QEMU."""
    if job.image_tag is None:
        return
    command = smoke_command(job.request, installed(job))
    if command is None:
        job.smoke_output = "nothing to import"
        return
    job.step("smoke test")
    code, output = job.engine.run_in_image(
        job.image_tag, job.request.target.platform, command, job.route.context, SMOKE_TIMEOUT
    )
    job.log.write(f"### smoke test: {command}\n{output}\n")
    if code == 124:
        raise SmokeFailed(
            f"{job.target}: the smoke test did not end within {SMOKE_TIMEOUT} s in {job.image_tag}: "
            + " / ".join(output.strip().splitlines()[-3:]),
            fix="A smoke test that hangs under QEMU is a failure too; see build.log for what it "
            "printed. --no-smoke skips the test.",
        )
    if code != 0:
        raise SmokeFailed(
            f"{job.target}: the smoke test failed in {job.image_tag} (exit code {code}): "
            + " / ".join(output.strip().splitlines()[-5:]),
            fix="The artifacts built and verified but do not work installed; see build.log. "
            "--no-smoke skips the test.",
        )
    if job.request.installed_with and not job.request.recipe.smoke:  # smoke_command's own script
        _same_versions(job, output)
    job.smoke_output = output.strip().splitlines()[-1] if output.strip() else "ok"
    job.say(f"smoke test passed: {job.smoke_output}")


_VERSION_MARK = "dockerarch-version:"


def _same_versions(job: JobState, output: str) -> None:
    """A wheel set's member whose image holds the whole set: every wheel of it is the version
    installed there (pip took them from the set's directory, which also holds the build
    environment's wheels: another version of one would make the image not the set)."""
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    found: dict[str, str] = {}
    for line in output.splitlines():
        if line.startswith(_VERSION_MARK):
            said, _, there = line.removeprefix(_VERSION_MARK).strip().partition(" ")
            found[canonicalize_name(said)] = there
    for report in installed(job):
        name, wanted, _, _ = parse_wheel_filename(report.name)
        version = found.get(name)
        try:
            same = version is not None and Version(version) == wanted
        except InvalidVersion:
            same = False
        if not same:
            raise SmokeFailed(
                f"{job.target}: {job.image_tag} holds {name} {version or '(not installed)'}, "
                f"where the set's wheel is {report.name}: the image is not the set installed",
                fix="The set's directory also holds another version of it (a build "
                "requirement's), which pip installed instead; nothing was written as the set. "
                "See build.log, and pin the version in the requirements (-c) meanwhile.",
            )


SMOKE_TIMEOUT = 1800  # seconds: torch's smoke test takes about 5 minutes under QEMU


def smoke_command(request: RenderRequest, reports: list[artifacts.ArtifactReport]) -> str | None:
    """The recipe's smoke command as a shell line; for a recipe without one, importing the
    artifacts' top-level modules (None: nothing to import)."""
    command = shlex.join(request.recipe.smoke)  # the recipe gives an argv
    if command:
        return command
    modules = sorted({m for r in reports for m in r.top_level})
    if not modules:
        return None
    if not request.installed_with:
        return f"python3 -c 'import {', '.join(modules)}; print(\"imported {' '.join(modules)}\")'"
    # a wheel set's image (the whole set installed): the versions it holds, said before the
    # imports' line (smoke_test compares them with the set's wheels)
    names = sorted({r.name.split("-", 1)[0] for r in reports if r.name.endswith(".whl")})
    script = (
        f"import {', '.join(modules)}\n"
        "from importlib.metadata import version\n"
        f"for name in {json.dumps(names)}:\n"
        f'    print("{_VERSION_MARK}", name, version(name))\n'
        f'print("imported {" ".join(modules)}")\n'
    )
    return f"python3 -c {shlex.quote(script)}"


def _verified_copy(landing: Path, reports: list[artifacts.ArtifactReport], work: Path) -> Path:
    """A directory holding only the verified artifacts (hard links where the file system allows),
    the runtime stage's named context: the landing directory also holds build.log, which grows
    while the job runs and would change the context's checksum."""
    verified = work / context_name("verified", work)
    verified.mkdir()
    for report in reports:
        try:
            os.link(landing / report.name, verified / report.name)
        except OSError:
            shutil.copy2(landing / report.name, verified / report.name)
    return verified
