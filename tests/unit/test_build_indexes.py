"""A recipe's build fetches inside the engine from the indexes pip's configuration names on this
machine (pipconfig.for_builds): given to its fetching steps as the BuildKit secret
dockerarch-index (never a layer, an argument or argv), on the host's network when one is on
loopback; a wheel set's build gets neither (it fetches on this machine)."""

from __future__ import annotations

import dataclasses
import io
import re
import stat
from pathlib import Path

from dockerarch import builders, buildsteps, paths
from dockerarch.accel import Decision
from dockerarch.pipconfig import BuildIndexes
from dockerarch.render import RenderRequest, for_generate, plan, render

from .test_toolchain_image import FakeEngine

TEAM = BuildIndexes(index_url="http://127.0.0.1:3141/root/mirror/+simple/",
                    extra_index_urls=("http://127.0.0.1:3141/team/dev/+simple/",))  # fmt: skip


def _request(mode: str = "hybrid") -> RenderRequest:
    (request,) = plan("wheel", arch="armv7", target=None, version=None,
                      package="zstandard==0.23.0", settings={})  # fmt: skip
    return for_generate(request, mode)


def _runs(text: str) -> list[str]:
    """The Dockerfile's RUN instructions, each with its continuation lines."""
    return re.findall(r"^RUN .*?(?<!\\)$", text, flags=re.MULTILINE | re.DOTALL)


def _job(
    tmp_path: Path, request: RenderRequest, indexes: BuildIndexes | None
) -> buildsteps.JobState:
    work = tmp_path / "work"
    work.mkdir()
    return buildsteps.JobState(
        request=request, decision=Decision(accel="hybrid", toolchain=request.toolchain),
        route=builders.Route(builder=builders.LOCAL, context=None, endpoint="unix:///x", accel="qemu"),
        options=buildsteps.BuildOptions(out=tmp_path, ca_bundle="/etc/ca.pem", indexes=indexes),
        engine=FakeEngine(), work=work, log=io.StringIO(), say=lambda _s: None,
        step=lambda _s: None, count=lambda *_a: None,
    )  # fmt: skip


def test_every_step_that_fetches_mounts_the_indexes_and_exports_them_for_pip_and_uv() -> None:
    for mode in ("hybrid", "none"):
        text = render(_request(mode), paths.template_dirs())
        fetching = [
            r
            for r in _runs(text)
            if re.search(r"pip install|pip-install|pip wheel|uv build|fetch-sdist", r)
        ]
        assert len(fetching) >= (4 if mode == "hybrid" else 2), fetching
        for run in fetching:
            assert "--mount=type=secret,id=dockerarch-index" in run, run
            assert 'export PIP_INDEX_URL UV_INDEX_URL="$PIP_INDEX_URL"' in run, run
            assert "--network=host" not in run  # no index on loopback
        assert "127.0.0.1" not in text  # the URLs are never in the Dockerfile


def test_an_index_on_loopback_puts_the_fetching_steps_on_the_host_s_network_once() -> None:
    request = dataclasses.replace(_request(), index_network=True)
    runs = _runs(render(request, paths.template_dirs()))
    fetching = [r for r in runs if "id=dockerarch-index" in r]
    assert fetching and all(r.count("--network=host") == 1 for r in fetching), fetching
    # with the compiles on the host's network too (a farm or compiler cache on loopback), the
    # compiling uv step still says it once
    both = dataclasses.replace(
        request, toolchain=dataclasses.replace(request.toolchain, compile_network="host")
    )
    compiling = [r for r in _runs(render(both, paths.template_dirs())) if "uv build" in r]
    assert compiling and all(r.count("--network=host") == 1 for r in compiling), compiling
    # a wheel set's build fetches nothing in the engine: never on the host's network for it
    assert "--network=host" not in render(dataclasses.replace(request, wheelset=Path("/set")),
                                          paths.template_dirs())  # fmt: skip


def test_a_recipe_s_job_gives_its_steps_the_indexes_as_a_private_secret(tmp_path: Path) -> None:
    job = _job(tmp_path, dataclasses.replace(_request(), index_network=True), TEAM)
    ca, index = job.secrets
    assert ca == "id=ca-bundle,src=/etc/ca.pem"
    path = Path(index.removeprefix("id=dockerarch-index,src="))
    assert path.parent == job.work and path.read_text() == TEAM.secret()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert job.allow == ("network.host",)
    assert job.secrets == (ca, index)  # written once


def test_a_wheel_set_s_job_is_given_no_index(tmp_path: Path) -> None:
    job = _job(
        tmp_path, dataclasses.replace(_request(), wheelset=tmp_path, index_network=True), TEAM
    )
    assert job.secrets == ("id=ca-bundle,src=/etc/ca.pem",)
    assert job.allow == ()
    assert not (job.work / "dockerarch-index").exists()


def test_a_build_on_a_node_is_refused_an_index_on_this_machines_loopback(tmp_path: Path) -> None:
    """The node's fetching steps, on its own host network, would ask the node's loopback: another
    index or none. Refused before anything is built, not replaced by the default index (a private
    name could then come from a public one); an index the node reaches, a local build and a
    wheel set (it fetches on this machine) go on."""
    import pytest

    from dockerarch import build
    from dockerarch.errors import UsageError

    node = builders.Route(builder="pi5", context="pi5", endpoint="ssh://pi@pi5", accel="native")
    local = builders.Route(builder=builders.LOCAL, context=None, endpoint="unix:///x",
                           accel="qemu")  # fmt: skip
    options = buildsteps.BuildOptions(out=tmp_path, indexes=TEAM)
    request = _request()
    with pytest.raises(UsageError) as refused:
        build._check_index_reach([request, request], [local, node], options)
    assert "runs on node 'pi5', which cannot reach the package index" in refused.value.problem
    assert "127.0.0.1:3141/team/dev" in refused.value.problem
    assert "--builder local" in (refused.value.fix or "")
    build._check_index_reach([request], [local], options)
    reached = dataclasses.replace(TEAM, index_url="https://index.team.example/simple/",
                                  extra_index_urls=())  # fmt: skip
    build._check_index_reach([request], [node], dataclasses.replace(options, indexes=reached))
    member = dataclasses.replace(request, wheelset=tmp_path)
    build._check_index_reach([member], [node], options)
