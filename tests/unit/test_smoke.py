"""The runtime image's smoke test (buildsteps.smoke_test): what it imports, and for a wheel set's
member whose image holds the whole set, that the versions there are the set's; against a
stand-in engine that answers with a given output."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import shlex
from importlib.metadata import version
from pathlib import Path

import pytest

from dockerarch import builders, buildsteps
from dockerarch.accel import Decision
from dockerarch.artifacts import ArtifactReport
from dockerarch.render import plan


class Answering:
    """Runs nothing: answers every command with ``output``, remembering the command."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.commands: list[str] = []

    def run_in_image(self, image: str, platform: str, command: str, context: str | None = None,
                     timeout: int | None = None, network: str | None = None,
                     volumes: tuple[tuple[str, str], ...] = ()) -> tuple[int, str]:  # fmt: skip
        self.commands.append(command)
        return 0, self.output


def wheel(name: str, version: str, top: str) -> ArtifactReport:
    return ArtifactReport(name=f"{name}-{version}-cp311-cp311-linux_aarch64.whl", sha256="0" * 64,
                          size=1, kind="wheel", elf_files=1, glibc=None, glibcxx=None,
                          top_level=(top,))  # fmt: skip


def job(tmp_path: Path, output: str, installed_with: tuple[ArtifactReport, ...] = ()
        ) -> tuple[buildsteps.JobState, Answering]:  # fmt: skip
    (request,) = plan("wheel", arch="aarch64", target=None, version=None, package="lightgbm",
                      settings={})  # fmt: skip
    request = dataclasses.replace(request, installed_with=installed_with)
    engine = Answering(output)
    state = buildsteps.JobState(
        request=request, route=builders.Route(builder=builders.LOCAL, context=None,
                                              endpoint="unix:///x", accel="qemu"),
        decision=Decision(accel="hybrid", toolchain=None),
        options=buildsteps.BuildOptions(out=tmp_path), engine=engine,  # type: ignore[arg-type]
        work=tmp_path, log=io.StringIO(), say=lambda _s: None, step=lambda _s: None,
        count=lambda *_a: None,
    )  # fmt: skip
    state.reports = [wheel("lightgbm", "4.5.0", "lightgbm")]
    state.image_tag = "dockerarch/lightgbm:4.5.0-debian-aarch64"
    return state, engine


def test_a_package_alone_imports_its_own_modules(tmp_path: Path) -> None:
    state, engine = job(tmp_path, "imported lightgbm\n")
    buildsteps.smoke_test(state)
    assert engine.commands == ["python3 -c 'import lightgbm; print(\"imported lightgbm\")'"]
    assert state.smoke_output == "imported lightgbm"


SET = (wheel("numpy", "2.4.6", "numpy"), wheel("scipy", "1.16.3", "scipy"))


def test_a_set_s_image_imports_every_module_and_says_its_versions(tmp_path: Path) -> None:
    # lightgbm's image installed numpy and scipy from the set with it: the same one run imports
    # them all and says which versions the image holds
    said = ("dockerarch-version: lightgbm 4.5.0\ndockerarch-version: numpy 2.4.6\n"
            "dockerarch-version: scipy 1.16.3\nimported lightgbm numpy scipy\n")  # fmt: skip
    state, engine = job(tmp_path, said, SET)
    buildsteps.smoke_test(state)
    assert state.smoke_output == "imported lightgbm numpy scipy"
    (command,) = engine.commands
    assert command.startswith("python3 -c ")
    script = shlex.split(command)[2]
    assert "import lightgbm, numpy, scipy\n" in script
    # the script as the target's Python runs it, against this interpreter's own distributions
    ours = script.replace('["lightgbm", "numpy", "scipy"]', '["packaging"]')
    ours = ours.replace("import lightgbm, numpy, scipy", "import packaging")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(ours, {})
    assert (
        printed.getvalue().splitlines()[0]
        == f"dockerarch-version: packaging {version('packaging')}"
    )


@pytest.mark.parametrize(
    ("said", "named"),
    [
        ("dockerarch-version: numpy 2.0.2\ndockerarch-version: scipy 1.16.3\n", "numpy 2.0.2"),
        ("dockerarch-version: numpy 2.4.6\n", "scipy (not installed)"),
    ],
)
def test_a_set_s_image_with_another_version_is_not_the_set(
    tmp_path: Path, said: str, named: str
) -> None:
    output = "dockerarch-version: lightgbm 4.5.0\n" + said + "imported lightgbm numpy scipy\n"
    state, _ = job(tmp_path, output, SET)
    with pytest.raises(
        buildsteps.SmokeFailed, match=re.escape(f"holds {named}, where the set's wheel is")
    ):
        buildsteps.smoke_test(state)
