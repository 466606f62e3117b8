"""The set proven on the target: installed into the target's runtime image from the set alone
(no index, no network) with its modules imported, and the user's own tests, under QEMU.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import TextIO

from dockerarch.artifacts import ArtifactReport
from dockerarch.build import Job, Progress
from dockerarch.buildsteps import BuildOptions, JobState
from dockerarch.errors import DockerarchError
from dockerarch.files import link_or_copy, make_work_dir
from dockerarch.sets.contexts import member_report
from dockerarch.sets.model import Member, TargetSet
from dockerarch.sets.wanted import SetRequest


class SetTestFailed(DockerarchError):
    """The installed set failed its import or the user's tests (--test)."""

    exit_code = 8


def check_installed(made: TargetSet, options: BuildOptions, progress: Progress,
                    wanted: SetRequest, landing: Path) -> None:  # fmt: skip
    """The set (``landing``) installed into the target's runtime image from the set alone (no
    index, no network, --only-binary), the libraries its wheels need found by the target's
    loader (the board's apt packages installed for them), every top-level module imported, then
    the user's tests (--test, with --test-requires installed beside the set), under QEMU. Its log
    is the set's check.log."""
    from dockerarch import buildsteps
    from dockerarch.build import plan_accel
    from dockerarch.builders import route
    from dockerarch.recipes import PackageSpec

    name = wanted.set_name
    spec = PackageSpec(spec=name, name=name, version="set")
    request = dataclasses.replace(made.request, package=spec, version="set", wheelset=landing)
    routed = route(request.target.platform, forced=options.builder,
                   fallback_qemu=options.fallback_qemu)  # fmt: skip
    decision = plan_accel([request], [routed], options.accel, ccache=options.ccache)[0]
    job = Job(request, options, progress, routed, decision)
    member, image = set_runtime_image(made, wanted, routed.builder) or (None, None)
    if member is not None and image is not None and job.engine.image_labels(image, routed.context):
        tag = buildsteps.image_tag(request, made.target)
        job.engine.tag_image(image, tag, routed.context)
        made.image = _image_record(job, tag, routed.context)
        made.check = str((member.record or {}).get("smoke") or "")
        others = [str(n) for n in (member.record or {}).get("installed_with") or []]  # type: ignore[attr-defined]
        rest = f", with the rest of the set: {len(others)} wheels" if others else ""
        progress.say(made.target, f"set: {image} ({member.key}'s runtime image{rest}) already is "
                     f"the set installed from itself alone: tagged {tag}, not installed again")  # fmt: skip
        (landing / "check.log").write_text(
            f"{member.key} was built in this run and installed into {image} from the set's "
            "wheels alone (no index, no network)"
            + (f", with the rest of the set (its run-time closure: {', '.join(others)}), each "
               "the set's version" if others else "")
            + f"; its libraries were found and its modules imported ({made.check}). Installing "
            f"the set again makes the same image, so {image} is tagged {tag}.\n"
        )  # fmt: skip
        return
    progress.say(made.target, "set: installing it from itself alone, under QEMU")
    work = make_work_dir(landing.parent, "check")
    try:
        job.work = work
        (work / "result").mkdir()
        # written beside the set until the check ends: the set is the builds' `wheelset`
        # context, which a growing log would change between the image's build and its checks
        with (work / "check.log").open("w", buffering=1) as log:
            state = job.new_state(work, log, time.monotonic())
            for step in (
                buildsteps.ensure_base,
                buildsteps.prepare_context,
                buildsteps.toolchain_image,
                buildsteps.runtime_base_image,
                buildsteps.toolchain_ready,
                buildsteps.toolchain_landed,  # the runtime image's pip-install mounts it
            ):
                step(state)
            board: list[ArtifactReport] = []
            for member in made.members.values():
                if member.path is None or not (member.node.runtime or member.node.test):
                    continue
                link_or_copy(member.path, state.landing / member.path.name)
                report = member_report(made, member)
                state.reports.append(report)
                if member.node.runtime:
                    board.append(report)
            state.needs_apt = list(made.needs_apt)  # the members' builds found these
            buildsteps.runtime_image(state)
            state.reports = board  # the smoke test imports what the board installs
            buildsteps.smoke_test(state)
            made.check = state.smoke_output
            if state.needs_apt:
                made.needs_apt = sorted(set(made.needs_apt) | set(state.needs_apt))
            if wanted.test_command:
                made.tests = run_tests(state, wanted, log)
            if state.image_tag:
                made.image = _image_record(job, state.image_tag, routed.context)
    finally:
        if (work / "check.log").is_file():
            shutil.copyfile(work / "check.log", landing / "check.log")
        shutil.rmtree(work, ignore_errors=True)
        job.work = None


def _image_record(job: Job, tag: str, context: str | None) -> dict[str, str] | None:
    """The checked image as the set's manifest records it (export-rootfs and export-img -r take
    it from there, and refuse it once the tag names another image)."""
    found = job.engine.image_labels(tag, context)
    if found is None:
        return None
    return {"tag": tag, "id": found[0], **({"engine": context} if context else {})}


def set_runtime_image(made: TargetSet, wanted: SetRequest,
                      builder: str) -> tuple[Member, str] | None:  # fmt: skip
    """The member whose runtime image already is the set installed, and that image's tag: it was
    built in this run by ``builder`` (the one that would check the set), so its runtime image was
    made from this set's wheels alone (no index, no network), and that image holds every board
    wheel of the set (the member's own, and those its checks covered: installed_with, their
    libraries checked, their modules imported, their versions the set's); nothing else goes on
    the board, and no --test asks for more. Installing the set again would make the same image."""
    if wanted.test_command:
        return None
    board = [m for m in made.members.values() if m.node.runtime or m.node.test]
    wheels = {m.path.name for m in board if m.path is not None}
    if len(wheels) != len(board):
        return None
    for member in board:
        record = member.record or {}
        image, route = record.get("image"), record.get("builder")
        if not member.built or member.reused or not member.node.runtime or member.path is None:
            continue
        if not isinstance(image, dict) or not image.get("tag"):
            continue
        if not isinstance(route, dict) or route.get("name") != builder:
            continue
        covered = {member.path.name, *(str(n) for n in record.get("installed_with") or [])}  # type: ignore[attr-defined]
        if wheels <= covered:
            return member, str(image["tag"])
    return None


TEST_TIMEOUT = 3600  # seconds: a user's test suite under QEMU


def run_tests(state: JobState, wanted: SetRequest, log: TextIO) -> str:
    """--test COMMAND in the set's image, the network off, {project} the --test-sources
    directory (read-only); a failure is the build's, with the tests' last lines."""
    assert wanted.test_command and state.image_tag
    sources = (wanted.test_sources or Path.cwd()).resolve()
    command = wanted.test_command.replace("{project}", "/project")
    state.step("tests")
    code, output = state.engine.run_in_image(
        state.image_tag, state.request.target.platform, f"cd /project && {command}",
        state.route.context, TEST_TIMEOUT, network="none", volumes=((str(sources), "/project"),),
    )  # fmt: skip
    log.write(f"### tests: {command}\n{output}\n")
    lines = output.strip().splitlines()
    if code != 0:
        said = (
            f"did not end within {TEST_TIMEOUT} s" if code == 124 else f"failed (exit code {code})"
        )
        raise SetTestFailed(
            f"{state.target}: the tests ({command}) {said} with the set installed in "
            f"{state.image_tag}: " + " / ".join(lines[-8:]),
            fix="The set built and imports, but your tests fail on the target (under QEMU); "
            "the whole output is in the set's check.log beside the build, and nothing replaced "
            "an earlier set.",
        )
    last = lines[-1] if lines else "ok"
    state.say(f"tests passed: {last}")
    return last
