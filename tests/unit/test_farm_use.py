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

    def machine_info(self, context: str | None = None) -> dict[str, str]:
        return {"architecture": "x86_64", "kernel": "6.1.0", "engine": "26.1.5", "os": "Debian"}

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


def native_job(tmp_path: Path, probe: tuple[int, str]) -> tuple[buildsteps.JobState, list[str]]:
    """Glow's amd64 build: native, no hybrid toolchain, with the farm's two servers."""
    (request,) = plan("glow", arch="amd64", target=None, version=None, package=None, settings={})
    route = builders.Route(builder=builders.LOCAL, context=None, endpoint="unix:///x",
                           accel="native")  # fmt: skip
    said: list[str] = []
    state = buildsteps.JobState(
        request=request, route=route, decision=Decision(accel="native"),
        options=buildsteps.BuildOptions(out=tmp_path, farm=SERVERS), engine=FakeEngine(probe),
        work=tmp_path, log=io.StringIO(), say=said.append, step=lambda _s: None,
        count=lambda *_a: None,
    )  # fmt: skip
    buildsteps.prepare_context(state)
    return state, said


def test_a_native_build_is_probed_from_its_build_tools_and_compiles_through_the_farm(
    tmp_path: Path,
) -> None:
    state, said = native_job(tmp_path, probe(0, 0))
    before = (state.context / "Dockerfile").read_text()
    assert "native-farm" not in before and "dockerarch-farm" not in before  # no --farm: as ever
    buildsteps.use_farm(state)
    engine = state.engine
    assert isinstance(engine, FakeEngine)
    assert engine.built == ["build-tools"] and engine.probed == [
        ("dockerarch/build-tools:debian-amd64", None)
    ]
    dockerfile = (state.context / "Dockerfile").read_text()
    # gcc and g++ become dockerarch-cc in the stage the probe ran in, then the build goes on
    assert "AS build-tools" in dockerfile and "FROM build-tools AS build" in dockerfile
    assert "native-farm x86_64-linux-gnu 12 amd64" in dockerfile
    assert (state.context / "_dockerarch_toolchain" / "native-farm").is_file()
    # Glow's compiling step gets the farm's hosts (a secret), and the compile log leaves with it
    cmake = dockerfile.index("cmake -S")
    compile_step = dockerfile[dockerfile.rindex("\nRUN ", 0, cmake) : cmake]
    assert "--mount=type=secret,id=dockerarch-farm" in compile_step
    assert "--network=host" not in dockerfile  # 10.0.0.x: no server on loopback
    assert "AS toolchain-log" in dockerfile
    cores = os.cpu_count() or 2
    assert state.request.options["MAX_JOBS"] == str(cores + 8 + 4)
    assert f"-j {cores + 12} --target model-compiler" in dockerfile
    assert state.farm_secret and any("and this machine take the compiles" in s for s in said)


def test_a_native_build_no_server_takes_is_the_build_without_the_farm(tmp_path: Path) -> None:
    state, said = native_job(tmp_path, probe(110, 1))
    before = (state.context / "Dockerfile").read_text()
    buildsteps.use_farm(state)
    assert any("no farm server can take this build's compiles" in s for s in said)
    assert (state.context / "Dockerfile").read_text() == before
    assert not state.request.native_farm and state.farm_secret is None
