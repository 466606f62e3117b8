"""The farm step of a build (buildsteps.use_farm) against a stand-in engine: when the farm is
not used, what a failed probe says, and that MAX_JOBS is raised only once servers take the
compiles (the Dockerfile rendered again), from the usable servers' slots."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockerarch import builders, buildsteps
from dockerarch.accel import Decision
from dockerarch.config import FarmServer
from dockerarch.engine import BuildSpec
from dockerarch.errors import EngineError
from dockerarch.render import for_generate, plan

SERVERS = (FarmServer("10.0.0.5", slots=8), FarmServer("10.0.0.6"))
DIGEST = "13aeb23170553672a724de1e253bfefb33f80982b340b53bc71b803694884234"


class FakeEngine:
    """Builds nothing; the probe prints what a probe run would."""

    def __init__(self, probe: tuple[int, str]) -> None:
        self.probe, self.built, self.probed = probe, [], []  # type: ignore[var-annotated]

    def image_labels(self, reference: str, context: str | None = None) -> None:
        return None

    def copy_image(self, reference: str, to_context: str) -> None:
        raise AssertionError("no copy")

    def build_lines(self, spec: BuildSpec) -> Iterator[str]:
        self.built.append(spec.stage)
        return iter(())

    def run_in_image(self, image: str, platform: str, command: str, context: str | None = None,
                     timeout: int | None = None, network: str | None = None,
                     volumes: tuple[tuple[str, str], ...] = ()) -> tuple[int, str]:  # fmt: skip
        self.probed.append((image, network))
        return self.probe


def job(tmp_path: Path, probe: tuple[int, str], *, mode: str = "hybrid", node: bool = False,
        chosen: bool = False) -> tuple[buildsteps.JobState, list[str]]:  # fmt: skip
    (request,) = plan("qpulib", arch="armv7", target=None, version=None, package=None,
                      settings={})  # fmt: skip
    request = for_generate(request, mode)
    route = builders.Route(builder="pi" if node else builders.LOCAL, context="pi" if node else None,
                           endpoint="unix:///x", accel="native" if node else "qemu")  # fmt: skip
    said: list[str] = []
    state = buildsteps.JobState(
        request=request, route=route, decision=Decision(accel=mode, toolchain=request.toolchain),
        options=buildsteps.BuildOptions(out=tmp_path, farm=SERVERS, jobs_chosen=chosen),
        engine=FakeEngine(probe), work=tmp_path, log=io.StringIO(), say=said.append,
        step=lambda _s: None, count=lambda *_a: None,
    )  # fmt: skip
    buildsteps.prepare_context(state)
    return state, said


def probe(*codes: int) -> tuple[int, str]:
    lines = [f"digest {DIGEST}"] + [
        f"server {s.address} {c}" for s, c in zip(SERVERS, codes, strict=True)
    ]
    return 0, "\n".join(lines) + "\n"


def test_a_build_without_a_toolchain_or_on_a_node_does_not_use_the_farm(tmp_path: Path) -> None:
    for kwargs, why in (({"mode": "none"}, "no hybrid toolchain"), ({"node": True}, "node 'pi'")):
        state, said = job(tmp_path / str(len(why)), probe(0, 0), **kwargs)  # type: ignore[arg-type]
        buildsteps.use_farm(state)
        assert why in said[0] and said[0].startswith("farm not used")
        assert state.request.options["MAX_JOBS"] == "2" and state.farm_secret is None
        assert "MAX_JOBS=2" in (state.context / "Dockerfile").read_text()


def test_a_probe_that_fails_is_said_with_its_output(tmp_path: Path) -> None:
    state, _ = job(tmp_path, (125, "docker: Error response from daemon: no such image\n"))
    with pytest.raises(EngineError) as err:
        buildsteps.use_farm(state)
    assert "Probing the farm" in err.value.problem and "exit code 125" in err.value.problem
    assert "no such image" in err.value.problem and "without --farm" in err.value.fix


def test_every_server_refused_leaves_the_jobs_alone(tmp_path: Path) -> None:
    state, said = job(tmp_path, probe(110, 1))
    buildsteps.use_farm(state)
    assert any("no farm server can take this build's compiles" in s for s in said)
    assert state.request.options["MAX_JOBS"] == "2" and state.farm_secret is None


def test_the_usable_servers_raise_the_jobs_and_the_dockerfile_is_rendered_again(
    tmp_path: Path,
) -> None:
    state, said = job(tmp_path, probe(0, 110))  # 10.0.0.6 refused: its 4 slots do not count
    buildsteps.use_farm(state)
    cores = os.cpu_count() or 2
    assert state.request.options["MAX_JOBS"] == str(cores + 8)
    assert f"make -f Makefile.libqpu -j {cores + 8}" in (state.context / "Dockerfile").read_text()
    assert state.built_options["MAX_JOBS"] == str(cores + 8)  # what manifest.json records
    assert (
        tmp_path / "farm-hosts"
    ).read_text() == f"--randomize 10.0.0.5:3632/8,lzo localhost/{cores}\n"
    assert any(f"MAX_JOBS={cores + 8}" in s for s in said)
    chosen, _ = job(tmp_path / "set", probe(0, 0), chosen=True)  # --set MAX_JOBS=N
    buildsteps.use_farm(chosen)
    assert chosen.request.options["MAX_JOBS"] == "2"
