"""A whole build job driven through a fake engine: the order of its steps, what lands, and what is
left after a failure at each step (an earlier good result untouched, the log kept, no temporary
directory)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dockerarch import accel, build, builders, buildsteps
from dockerarch.engine import BuildFailed, BuildSpec
from dockerarch.errors import DockerarchError
from dockerarch.render import plan

LOCAL = builders.Route(builder="local", context=None, endpoint="unix:///x.sock", accel="qemu")


class Recorder:
    """Progress that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, name: str, line: str) -> None:
        self.lines.append(f"say {line}")

    def step(self, name: str, words: str) -> None:
        self.lines.append(f"step {words}")

    def count(self, name: str, words: str, done: int, total: int, shown: str) -> None:
        self.lines.append(f"count {words} {shown}")

    def end(self, name: str, words: str) -> None:
        self.lines.append(f"end {words}")


class FakeEngine:
    """The engine a build job sees: bases exist, buildx prints a compile and exports a tarball,
    the runtime image loads, the smoke command prints; ``fail`` makes one of them go wrong."""

    def __init__(self, fail: str | None = None, labels: dict[str, str] | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail
        self.labels = labels or {}
        self.build_args: list[dict[str, str]] = []

    def image_labels(
        self, reference: str, context: str | None = None
    ) -> tuple[str, dict[str, str]] | None:
        self.calls.append(f"image_labels {reference}")
        return ("sha256:" + reference.replace("/", "-"), self.labels)

    def copy_image(self, reference: str, to_context: str) -> None:
        self.calls.append(f"copy_image {reference}")

    def machine_info(self, context: str | None = None) -> dict[str, str]:
        return {"architecture": "x86_64", "kernel": "6.1.0", "engine": "26.1.5", "os": "Debian"}

    def build_lines(self, spec: BuildSpec) -> Iterator[str]:
        self.calls.append(f"build_lines {spec.stage}")
        self.build_args.append(dict(spec.build_args or {}))
        yield "#7 [build 3/4] RUN make -j2\n"
        yield "#7 0.5 [1/2] cc -c a.c\n#7 0.9 [2/2] cc -c b.c\n"
        if self.fail == "compile":
            yield '#7 ERROR: process "/bin/sh -c make -j2" did not complete: exit code: 2\n'
            raise BuildFailed("buildx failed", return_code=1)
        if self.fail == "killed":
            raise BuildFailed("buildx failed", return_code=-9)
        if self.fail == "disk":  # apt's words, met on a real node whose disk was full
            yield "#7 13.23   Error writing to file - write (28: No space left on device)\n"
            yield "#7 14.87 E: Unable to locate package python3\n"
            yield '#7 ERROR: process "/bin/sh -c make -j2" did not complete: exit code: 100\n'
            raise BuildFailed("buildx failed", return_code=1)
        if spec.stage == "artifacts":
            assert spec.output_dir is not None
            with tarfile.open(spec.output_dir / "hello-1.0.tar.gz", "w:gz") as archive:
                info = tarfile.TarInfo("usr/share/hello/README")
                info.size = 5
                archive.addfile(info, io.BytesIO(b"hello"))
        yield "#7 DONE 1.2s\n"

    def run_in_image(
        self,
        image: str,
        platform: str,
        command: str,
        context: str | None = None,
        timeout: int | None = None,
    ) -> tuple[int, str]:
        self.calls.append(f"run_in_image {image}")
        assert timeout == buildsteps.SMOKE_TIMEOUT
        if self.fail == "hang":
            return 124, "waiting for the store\n"
        return (1, "Traceback\nImportError: nope\n") if self.fail == "smoke" else (0, "hello ok\n")


def _job(tmp_path: Path, engine: FakeEngine, progress: Recorder) -> build.Job:
    (request,) = plan("qpulib", arch=None, target="debian-armv7", version=None, package=None,
                      settings={})  # fmt: skip
    options = build.BuildOptions(out=tmp_path / "dist")
    return build.Job(request, options, progress, LOCAL, accel.Decision(accel="qemu"), engine)


def test_a_job_runs_its_steps_in_order_and_lands_the_verified_result(tmp_path: Path) -> None:
    engine, progress = FakeEngine(), Recorder()
    result = _job(tmp_path, engine, progress).run()
    assert result.error is None, result.error
    final = tmp_path / "dist" / "debian-armv7" / "qpulib-master"
    assert result.directory == final and result.artifacts == [final / "hello-1.0.tar.gz"]
    assert sorted(p.name for p in final.iterdir()) == [
        "build.log",
        "hello-1.0.tar.gz",
        "manifest.json",
    ]
    assert [p.name for p in final.parent.iterdir()] == ["qpulib-master"]  # nothing else left
    manifest = json.loads((final / "manifest.json").read_text())
    # every step, timed, but the manifest's own (it is being written)
    assert [s["step"] for s in manifest["steps"]] == [name for name, _ in buildsteps.STEPS][:-1]
    assert all(s["seconds"] >= 0 for s in manifest["steps"])
    assert manifest["smoke"] == "hello ok" and manifest["image"]["id"]
    assert manifest["artifacts"][0]["name"] == "hello-1.0.tar.gz"
    # the engine's machine as it reports it: an x86-64 kernel ran the armv7 build's code emulated
    assert manifest["builder"]["machine"] == {"architecture": "x86_64", "kernel": "6.1.0",
                                              "engine": "26.1.5", "os": "Debian", "native": False}  # fmt: skip
    base = "dockerarch/base/debian-armv7:bookworm"
    runtime = "dockerarch/qpulib:master-debian-armv7"
    assert engine.calls == [
        f"image_labels {base}", "build_lines artifacts", "build_lines runtime",
        f"image_labels {runtime}", f"run_in_image {runtime}",
    ]  # fmt: skip
    # the progress: what the build does, in words, and how far the compile is
    assert "count compiling qpulib with make 2/2" in progress.lines
    assert "say smoke test passed: hello ok" in progress.lines
    assert "### smoke test:" in (final / "build.log").read_text()


def test_the_manifest_of_a_build_from_source_names_the_tree_not_the_options_default(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "QPULib"
    (tree / "Lib").mkdir(parents=True)
    (tree / "Lib" / "QPULib.h").write_text("// QPULib\n")
    (request,) = plan("qpulib", arch=None, target="debian-armv7", version=None, package=None,
                      settings={}, source=str(tree))  # fmt: skip
    options = build.BuildOptions(out=tmp_path / "dist")
    job = build.Job(request, options, Recorder(), LOCAL, accel.Decision(accel="qemu"), FakeEngine())
    result = job.run()
    assert result.error is None, result.error
    manifest = json.loads(
        (tmp_path / "dist" / "debian-armv7" / "qpulib-master" / "manifest.json").read_text()
    )
    assert manifest["options"]["SOURCE"] == "--source"  # the git default was not what was built
    assert manifest["source"]["path"] == str(tree)


@pytest.mark.parametrize("failing", [name for name, _ in buildsteps.STEPS])
def test_a_failure_at_any_step_leaves_the_earlier_result_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    final = tmp_path / "dist" / "debian-armv7" / "qpulib-master"
    final.mkdir(parents=True)
    (final / "good.txt").write_text("an earlier good result")

    def fail(job: buildsteps.JobState) -> None:
        job.log.write("what the step printed\n")
        raise DockerarchError(f"{failing} went wrong")

    monkeypatch.setattr(
        build, "STEPS", [(n, fail if n == failing else s) for n, s in buildsteps.STEPS]
    )
    result = _job(tmp_path, FakeEngine(), Recorder()).run()
    assert result.error is not None and result.error.problem == f"{failing} went wrong"
    assert [p.name for p in final.iterdir()] == ["good.txt"]  # untouched
    assert result.log == final.parent / "qpulib-master.failed.log"
    assert "what the step printed" in result.log.read_text()
    assert sorted(p.name for p in final.parent.iterdir()) == [
        "qpulib-master",
        "qpulib-master.failed.log",
    ]


@pytest.mark.parametrize(
    ("fail", "kind", "words"),
    [
        ("compile", buildsteps.BuildStepFailed, "the build failed at [build 3/4] RUN make -j2"),
        ("killed", buildsteps.BuildStopped, "docker buildx was killed (signal 9) while compiling qpulib with make"),
        ("disk", buildsteps.DiskFull, "this machine's Docker engine ran out of disk (no space left on device) at [build 3/4] RUN make -j2"),
        ("smoke", buildsteps.SmokeFailed, "the smoke test failed in dockerarch/qpulib:master-debian-armv7 (exit code 1)"),
        ("hang", buildsteps.SmokeFailed, "the smoke test did not end within 1800 s"),
    ],
)  # fmt: skip
def test_what_the_engine_does_wrong_is_told_as_such(
    tmp_path: Path, fail: str, kind: type[DockerarchError], words: str
) -> None:
    result = _job(tmp_path, FakeEngine(fail), Recorder()).run()
    assert isinstance(result.error, kind) and words in result.error.problem
    assert (
        result.directory is None
        and result.log is not None
        and result.log.name.endswith(".failed.log")
    )
    if fail == "compile":
        assert isinstance(result.error, buildsteps.BuildStepFailed)
        assert any("exit code: 2" in line for line in result.error.tail)
    left = sorted(p.name for p in (tmp_path / "dist" / "debian-armv7").iterdir())
    assert left == ["qpulib-master.failed.log"]


EPOCH_LABEL = "org.dockerarch.base.source-date-epoch"


def test_every_buildx_run_of_a_job_writes_the_bases_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SOURCE_DATE_EPOCH reaches every buildx invocation of the job alike (or they would not
    share their steps) and manifest.json: the base's date, or the one dockerarch ran with."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    for given, expected in ((None, 1783764997), ("1700000000", 1700000000)):
        if given:
            monkeypatch.setenv("SOURCE_DATE_EPOCH", given)
        engine = FakeEngine(labels={EPOCH_LABEL: "1783764997"})
        out = tmp_path / str(expected)
        job = _job(out, engine, Recorder())
        assert job.run().error is None
        assert engine.build_args and all(
            args == {"SOURCE_DATE_EPOCH": str(expected)} for args in engine.build_args
        ), engine.build_args
        manifest = json.loads(next((out / "dist").rglob("manifest.json")).read_text())
        assert manifest["source_date_epoch"] == expected


def test_without_a_known_date_the_build_passes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    engine = FakeEngine(labels={EPOCH_LABEL: "not a date"})  # an SD card's base has none
    assert _job(tmp_path, engine, Recorder()).run().error is None
    assert engine.build_args and all(args == {} for args in engine.build_args)


@pytest.mark.parametrize("given", ["yesterday", "-5", "100"])  # 100: before zip's 1980
def test_a_bad_source_date_epoch_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", given)
    engine = FakeEngine(labels={EPOCH_LABEL: "1783764997"})
    result = _job(tmp_path, engine, Recorder()).run()
    assert result.error is not None and f"SOURCE_DATE_EPOCH={given!r}" in result.error.problem
    assert "git log -1 --format=%ct" in (result.error.fix or "")
    assert engine.build_args == []  # nothing was built


def test_after_ctrl_c_no_further_step_starts_and_the_log_is_kept_as_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while a step runs no program (verify): the job's thread must not go on to start
    buildx for the runtime image while dockerarch is stopping what it started."""
    import threading

    from dockerarch import process

    monkeypatch.setattr(process, "_interrupted", threading.Event())
    final = tmp_path / "dist" / "debian-armv7" / "qpulib-master"
    ran: list[str] = []

    Step = Callable[[buildsteps.JobState], None]

    def step(name: str, original: Step) -> Step:
        def run(job: buildsteps.JobState) -> None:
            ran.append(name)
            original(job)
            if name == "verify":
                job.log.write("verified, then Ctrl-C\n")
                process._interrupted.set()  # as interrupt_children does

        return run

    monkeypatch.setattr(build, "STEPS", [(n, step(n, s)) for n, s in buildsteps.STEPS])
    result = _job(tmp_path, FakeEngine(), Recorder()).run()
    names = [n for n, _ in buildsteps.STEPS]
    assert ran == names[: names.index("verify") + 1]
    assert result.error is not None and result.error.exit_code == 130
    assert result.log == final.parent / "qpulib-master.interrupted.log"
    assert "verified, then Ctrl-C" in result.log.read_text()
    assert [p.name for p in final.parent.iterdir()] == ["qpulib-master.interrupted.log"]
