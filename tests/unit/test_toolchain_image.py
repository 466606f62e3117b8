"""A hybrid build's native stages from a machine-wide toolchain image (buildsteps.toolchain_image),
and every build's runtime-base from a machine-wide image (buildsteps.runtime_base_image):
keyed by what they are made from, built once, given to the build in their place, and used by the
farm's probe; against a stand-in engine."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockerarch import accel, builders, buildsteps, machineimages, paths
from dockerarch.accel import Decision
from dockerarch.config import FarmServer, RegistryConfig
from dockerarch.engine import BuildSpec, Pulled
from dockerarch.errors import EngineError
from dockerarch.registry import RemoteImage
from dockerarch.render import for_generate, plan

BASE = "sha256:" + "1" * 64
DIGEST = "sha256:" + "d" * 64  # of a manifest in the stand-in registry


class FakeEngine:
    """Has the images in ``images``; a build of a loaded tag adds it. ``registry``: what a
    registry holds (reference -> Pulled, or an EngineError its pull raises); its API answers
    for the same references (a Pulled's manifest digest: DIGEST), and a pull by digest gets
    what its tag names."""

    def __init__(self, images: set[str] | None = None,
                 registry: dict[str, Pulled | EngineError] | None = None) -> None:  # fmt: skip
        self.images = set(images or ())
        self.registry = dict(registry or {})
        self.built: list[BuildSpec] = []
        self.probed: list[str] = []
        self.pushed: list[str] = []
        self.looked_up: list[str] = []

    def remote_image(self, registry: RegistryConfig, repository: str, tag: str,
                     platform: str) -> RemoteImage | None:  # fmt: skip
        reference = f"{registry.address}/{repository}:{tag}"
        self.looked_up.append(reference)
        found = self.registry.get(reference)
        if isinstance(found, EngineError):
            raise found
        if found is None:
            return None
        return RemoteImage(digest=DIGEST, labels=found.labels, platform=found.platform)

    def pull_image(self, reference: str, platform: str) -> Pulled | None:
        found = self.registry.get(reference.removesuffix(f"@{DIGEST}"))
        if isinstance(found, EngineError):
            raise found
        if found is not None:
            self.images.add(reference)
        return found

    def push_as(self, tag: str, remote: str) -> str:
        assert tag in self.images
        self.pushed.append(remote)
        return remote

    def remove_tag(self, reference: str) -> None:
        self.images.discard(reference)

    def tag_image(self, reference: str, tag: str, context: str | None = None) -> None:
        assert reference in self.images, reference
        self.images.add(tag)

    def image_labels(
        self, reference: str, context: str | None = None
    ) -> tuple[str, dict[str, str]] | None:
        return ("sha256:" + "2" * 64, {}) if reference in self.images else None

    def machine_info(self, context: str | None = None) -> dict[str, str]:
        return {"architecture": "x86_64", "kernel": "6.1.0", "engine": "26.1.5", "os": "Debian"}

    def copy_image(self, reference: str, to_context: str) -> None:
        raise AssertionError("no copy")

    def build_lines(self, spec: BuildSpec) -> Iterator[str]:
        self.built.append(spec)
        if spec.load_tag:
            self.images.add(spec.load_tag)
        return iter(())

    def run_in_image(self, image: str, platform: str, command: str, context: str | None = None,
                     timeout: int | None = None, network: str | None = None,
                     volumes: tuple[tuple[str, str], ...] = ()) -> tuple[int, str]:  # fmt: skip
        self.probed.append(image)
        return 1, "no servers here\n"


def job(tmp_path: Path, engine: FakeEngine, *, recipe: str = "qpulib", node: bool = False,
        farm: tuple[FarmServer, ...] = (), sharing: machineimages.Sharing | None = None,
        ) -> tuple[buildsteps.JobState, list[str]]:  # fmt: skip
    (request,) = plan(recipe, arch="armv7", target=None, version=None, package=None, settings={})
    request = for_generate(request, "hybrid")
    route = builders.Route(builder="pi" if node else builders.LOCAL, context="pi" if node else None,
                           endpoint="unix:///x", accel="qemu")  # fmt: skip
    said: list[str] = []
    work = tmp_path / f"work-{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    state = buildsteps.JobState(
        request=request, route=route, decision=Decision(accel="hybrid", toolchain=request.toolchain),
        options=buildsteps.BuildOptions(out=tmp_path, farm=farm, cache=False, machine_images=sharing),
        engine=engine, work=work, log=io.StringIO(), say=said.append,
        step=lambda _s: None, count=lambda *_a: None,
    )  # fmt: skip
    state.toolchain_base_id = BASE
    buildsteps.prepare_context(state)
    return state, said


def test_the_first_build_makes_the_image_and_takes_its_native_stages_from_it(
    tmp_path: Path,
) -> None:
    engine = FakeEngine()
    state, said = job(tmp_path, engine)
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    python, spec = sorted(engine.built, key=lambda s: s.stage)
    assert (spec.stage, spec.platform, spec.cache) == ("toolchain-stage", "linux/amd64", False)
    tag = spec.load_tag
    assert tag is not None and tag.startswith("dockerarch/toolchain:arm-linux-gnueabihf-gcc12-")
    # its lower layers, the native Python, an image of their own (the first steps take it)
    assert (python.stage, python.platform) == ("native-python-stage", "linux/amd64")
    python_tag = python.load_tag
    assert python_tag is not None and python_tag.startswith("dockerarch/native-python:")
    assert state.toolchain_image == tag
    assert state.build_args == {"DOCKERARCH_NATIVE_PYTHON": python_tag, "DOCKERARCH_TOOLCHAIN": tag}
    assert any(tag in line and "made in" in line for line in said), said
    assert any(python_tag in line and "made in" in line for line in said), said

    # Another build with the same toolchain (even with --no-cache) builds no stage of it again.
    again, _ = job(tmp_path, engine, recipe="qpulib")
    buildsteps.toolchain_image(again)
    buildsteps.toolchain_ready(again)
    assert len(engine.built) == 2 and again.toolchain_image == tag
    assert again.build_args == state.build_args
    # A toolchain made where the native Python image is already: made on it (its layers).
    engine.images.discard(tag)
    third, _ = job(tmp_path, engine, recipe="qpulib")
    buildsteps.toolchain_image(third)
    buildsteps.toolchain_ready(third)
    assert len(engine.built) == 3 and engine.built[-1].stage == "toolchain-stage"
    assert (engine.built[-1].build_args or {})["DOCKERARCH_NATIVE_PYTHON"] == python_tag


TEAM = machineimages.Sharing(
    RegistryConfig(address="registry.example.invalid:5000", namespace="dockerarch"), push=True
)


def _remote(tag: str) -> str:
    return TEAM.remote(tag)


def _made_elsewhere(tmp_path: Path, recipe: str = "qpulib") -> tuple[BuildSpec, BuildSpec]:
    """The native Python image's and the toolchain image's builds (tag, key label) as another
    machine of the team makes them for ``recipe``."""
    probe = FakeEngine()
    made, _ = job(tmp_path, probe, recipe=recipe)
    buildsteps.toolchain_image(made)
    buildsteps.toolchain_ready(made)
    python, toolchain = sorted(probe.built, key=lambda s: s.stage)
    assert (python.stage, toolchain.stage) == ("native-python-stage", "toolchain-stage")
    return python, toolchain


def test_a_machine_image_made_here_is_pushed_to_the_team_s_registry_with_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machineimages, "record_use", lambda tag: True)
    engine = FakeEngine()
    state, said = job(tmp_path, engine, sharing=TEAM)
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    assert len(state.pushes) == 2  # pushed while the build goes on with them
    buildsteps.pushes_done(state)
    assert state.pushes == []
    tags = []
    for spec in engine.built:
        tag = spec.load_tag
        assert tag is not None and spec.labels is not None
        made_key = spec.labels[machineimages.KEY_LABEL]
        assert tag.endswith(made_key[:16])  # the label holds the whole key the tag is cut from
        tags.append(tag)
    assert sorted(engine.pushed) == sorted(_remote(tag) for tag in tags)
    assert sorted(engine.pushed) == sorted(
        "registry.example.invalid:5000/dockerarch/" + tag.removeprefix("dockerarch/")
        for tag in tags
    )
    assert not any(_remote(tag) in engine.images for tag in tags)  # its own tags only
    assert any("has no toolchain:" in line for line in said), said
    assert any("has no native-python:" in line for line in said), said
    assert all(any(f"pushed to {_remote(tag)}" in line for line in said) for tag in tags), said
    # read-only ("pull"): made, never pushed
    engine = FakeEngine()
    state, _ = job(tmp_path, engine, sharing=machineimages.Sharing(TEAM.registry))
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    buildsteps.pushes_done(state)
    assert len(engine.built) == 2 and engine.pushed == [] and state.pushes == []


def test_a_machine_image_in_the_team_s_registry_is_pulled_not_made_when_its_key_and_platform_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machineimages, "record_use", lambda tag: True)
    python, spec = _made_elsewhere(tmp_path)
    tag, right, python_tag = spec.load_tag, spec.labels, python.load_tag
    assert tag is not None and right is not None and python_tag is not None
    good = Pulled(labels=dict(right), platform="linux/amd64")
    python_good = Pulled(labels=dict(python.labels or {}), platform="linux/amd64")
    engine = FakeEngine(registry={_remote(tag): good, _remote(python_tag): python_good})
    state, said = job(tmp_path, engine, sharing=TEAM)
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    assert engine.built == [] and engine.pushed == []
    # the native Python pulled at once; the toolchain image checked through the registry's API
    # and given to the build by its digest there, for the build to pull beside its first steps
    assert python_tag in engine.images and tag not in engine.images
    assert engine.looked_up == [_remote(tag)]
    assert state.build_args == {"DOCKERARCH_NATIVE_PYTHON": python_tag,
                                "DOCKERARCH_TOOLCHAIN": f"{_remote(tag)}@{DIGEST}"}  # fmt: skip
    assert any(f"{python_tag} pulled from {TEAM.prefix}" in line for line in said), said
    assert any(f"{tag}: {TEAM.prefix} has it" in line for line in said), said
    # after the build: kept on the machine under its own tag, and named so from then on
    buildsteps.toolchain_landed(state)
    assert tag in engine.images and f"{_remote(tag)}@{DIGEST}" not in engine.images
    assert state.toolchain_image == tag and state.build_args["DOCKERARCH_TOOLCHAIN"] == tag
    assert any(f"{tag} pulled from {TEAM.prefix}" in line for line in said), said
    buildsteps.toolchain_landed(state)  # once
    assert engine.built == []
    # another key under the tag, or another platform: not taken, made here
    for bad in (Pulled(labels={machineimages.KEY_LABEL: "0" * 64}, platform="linux/amd64"),
                Pulled(labels=dict(right), platform="linux/arm64")):  # fmt: skip
        engine = FakeEngine(registry={_remote(tag): bad, _remote(python_tag): python_good})
        state, said = job(tmp_path, engine, sharing=TEAM)
        buildsteps.toolchain_image(state)
        buildsteps.toolchain_ready(state)
        assert [s.stage for s in engine.built] == ["toolchain-stage"]
        assert _remote(tag) not in engine.images and state.build_args["DOCKERARCH_TOOLCHAIN"] == tag
        assert any("is not what its tag says" in line for line in said), said
    # a registry that does not answer: made here, said
    engine = FakeEngine(registry={_remote(tag): EngineError("connection refused"),
                                  _remote(python_tag): EngineError("connection refused")})  # fmt: skip
    state, said = job(tmp_path, engine, sharing=TEAM)
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    assert len(engine.built) == 2
    assert any("not taken from" in line and "connection refused" in line for line in said), said
    assert any("not pulled from" in line and "connection refused" in line for line in said), said


def test_a_runtime_base_made_on_a_team_s_machine_takes_the_pulled_native_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native Python image pulled (a second): the runtime base made here uses it rather than
    building its stage again (about 10 s on a fresh machine)."""
    monkeypatch.setattr(machineimages, "record_use", lambda tag: True)
    python, _ = _made_elsewhere(tmp_path, "numpy")
    assert python.load_tag is not None
    engine = FakeEngine(registry={_remote(python.load_tag): Pulled(
        labels=dict(python.labels or {}), platform="linux/amd64")})  # fmt: skip
    state, said = job(tmp_path, engine, recipe="numpy", sharing=TEAM)
    state.base_id = BASE
    buildsteps.toolchain_image(state)
    buildsteps.runtime_base_image(state)
    (runtime,) = [s for s in engine.built if s.stage == "runtime-base-stage"]
    assert (runtime.build_args or {})["DOCKERARCH_NATIVE_PYTHON"] == python.load_tag
    assert not any(s.stage == "native-python-stage" for s in engine.built)
    assert any(f"{python.load_tag} pulled from" in line for line in said), said
    buildsteps.toolchain_ready(state)
    assert state.build_args["DOCKERARCH_NATIVE_PYTHON"] == python.load_tag


def test_a_toolchain_image_the_registry_gives_something_else_for_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pull by digest after the build is checked like any: what it gets under another key
    is not tagged as this machine's toolchain image (the build went on with what it checked)."""
    monkeypatch.setattr(machineimages, "record_use", lambda tag: True)
    python, spec = _made_elsewhere(tmp_path)
    tag, python_tag = spec.load_tag, python.load_tag
    assert tag is not None and python_tag is not None
    engine = FakeEngine(
        images={python_tag},
        registry={_remote(tag): Pulled(labels=dict(spec.labels or {}), platform="linux/amd64")},
    )
    state, said = job(tmp_path, engine, sharing=TEAM)
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    engine.registry[_remote(tag)] = Pulled(labels={machineimages.KEY_LABEL: "0" * 64},
                                           platform="linux/amd64")  # fmt: skip
    buildsteps.toolchain_landed(state)
    assert tag not in engine.images and not any(_remote(tag) in i for i in engine.images)
    assert state.build_args["DOCKERARCH_TOOLCHAIN"] == f"{_remote(tag)}@{DIGEST}"
    assert any("is not what its tag says" in line and "the build goes on with the registry's"
               in line for line in said), said  # fmt: skip


def test_arm64_s_variant_is_the_same_platform() -> None:
    assert machineimages.same_platform("linux/arm64/v8", "linux/arm64")
    assert not machineimages.same_platform("linux/arm/v7", "linux/arm64")


def test_a_build_on_a_node_builds_its_own_stages(tmp_path: Path) -> None:
    engine = FakeEngine()
    state, _ = job(tmp_path, engine, node=True)
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    assert engine.built == [] and state.toolchain_image is None
    assert state.build_args == {}


def test_the_farm_probes_with_the_toolchain_image(tmp_path: Path) -> None:
    engine = FakeEngine()
    state, _ = job(tmp_path, engine, farm=(FarmServer("10.0.0.5"),))
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    with pytest.raises(EngineError, match="Probing the farm with dockerarch/toolchain:"):
        buildsteps.use_farm(state)  # the stand-in's probe fails; what matters is what it ran
    assert engine.probed == [state.toolchain_image] and len(engine.built) == 2


DOCKERFILE = """\
# Generated
FROM --platform=linux/amd64 base AS native-python-stage
RUN apt-get install python3

FROM native-python-stage AS toolchain-wheels
RUN python3 -m pip install uv

# a comment that moves
FROM --platform=linux/amd64 base AS toolchain-tree
RUN apt-get install gcc-arm-linux-gnueabihf
COPY --from=toolchain-wheels /opt/dockerarch-uv/ /opt/dockerarch-uv/
RUN sh /dockerarch/collect-toolchain

FROM native-python-stage AS toolchain-stage
COPY --from=toolchain-tree /toolchain/ /toolchain/

FROM --platform=linux/amd64 ${DOCKERARCH_TOOLCHAIN} AS toolchain

FROM target AS build
RUN make
"""


def key(tmp_path: Path, dockerfile: str = DOCKERFILE, base: str = BASE) -> str:
    return accel.toolchain_key(dockerfile, tmp_path, base)


def test_the_key_follows_what_the_native_stages_are_made_from(tmp_path: Path) -> None:
    scripts = tmp_path / accel.CONTEXT_DIR
    scripts.mkdir()
    (scripts / "collect-toolchain").write_text("echo one\n")
    first = key(tmp_path)
    assert key(tmp_path) == first
    # Not the build's own stages, not comments.
    assert key(tmp_path, DOCKERFILE.replace("make", "ninja")) == first
    assert key(tmp_path, DOCKERFILE.replace("that moves", "elsewhere")) == first
    # The packages, another base, a script of the context: another image.
    assert key(tmp_path, DOCKERFILE.replace("gcc-arm", "g++-arm")) != first
    assert key(tmp_path, DOCKERFILE.replace("python3", "python3 python3-yaml")) != first
    assert key(tmp_path, DOCKERFILE.replace("install uv", "install uv==1")) != first
    assert key(tmp_path, DOCKERFILE.replace("/toolchain/ /toolchain/", "/toolchain/ /")) != first
    assert key(tmp_path, base="sha256:" + "3" * 64) != first
    (scripts / "collect-toolchain").write_text("echo two\n")
    assert key(tmp_path) != first
    (scripts / "collect-toolchain").write_text("echo one\n")
    (scripts / "collect-toolchain").chmod(0o755)
    assert key(tmp_path) != first
    # A script the build's own stages bind (not the native stages): the same image.
    (scripts / "collect-toolchain").chmod(0o644)
    (scripts / "pip-install").write_text("echo three\n")
    assert key(tmp_path) == first


def test_the_key_s_files_are_what_the_native_stages_read() -> None:
    """Every file collect-toolchain takes from beside itself (``$here/NAME``), and those take in
    turn (farm-client), is in the key, and every file of the key is in the context (the stages
    also run native-wheels and, for 32-bit targets, collect-python32)."""
    read = {"collect-toolchain", "native-wheels", "collect-python32"}
    todo = ["collect-toolchain"]
    while todo:
        script = (paths.data_path("toolchain") / todo.pop()).read_text()
        found = set(re.findall(r"\$here/([\w.-]+)", script)) - read
        read |= found
        todo += [f for f in found if not f.endswith((".c", ".py"))]  # the scripts among them
    assert read == set(accel.TOOLCHAIN_FILES)
    assert all((paths.data_path("toolchain") / f).is_file() for f in accel.TOOLCHAIN_FILES)


def test_a_dockerfile_without_the_stages_has_no_key(tmp_path: Path) -> None:
    for stage in accel.NATIVE_STAGES:
        with pytest.raises(ValueError, match=f"no stage {stage}"):
            key(tmp_path, DOCKERFILE.replace(f"AS {stage}\n", "AS tools\n"))


def test_the_runtime_base_is_made_while_the_toolchain_image_is(tmp_path: Path) -> None:
    """A machine's first hybrid build makes both machine images: the toolchain image (about
    40 s) in a thread of its own, its lines in a log of their own, while the runtime base (which
    needs no toolchain) is made; the build waits for the toolchain only where it uses it."""
    import threading

    release = threading.Event()

    class Slow(FakeEngine):
        def build_lines(self, spec: BuildSpec) -> Iterator[str]:
            if spec.stage == "toolchain-stage":
                assert release.wait(10)
                yield "#5 [toolchain-stage 2/4] RUN apt-get install -y gcc-12-arm-linux-gnueabihf\n"
            yield from super().build_lines(spec)

    engine = Slow()
    state, said = job(tmp_path, engine, recipe="numpy")
    state.base_id = BASE
    buildsteps.toolchain_image(state)
    assert state.toolchain_pending is not None and state.toolchain_image is None
    buildsteps.runtime_base_image(state)  # the toolchain image still being made
    (runtime,) = [s for s in engine.built if s.stage == "runtime-base-stage"]
    assert state.runtime_base_image
    # the native Python image, which it byte-compiles with, was being made too: the runtime
    # base is made from the same stage (BuildKit builds it once for both), waiting for neither
    assert "DOCKERARCH_NATIVE_PYTHON" not in (runtime.build_args or {})
    assert any("the native Python image is being made of" in line for line in said), said
    waited: list[str] = []
    state.step = waited.append
    threading.Timer(0.2, release.set).start()
    buildsteps.toolchain_ready(state)
    assert waited == ["waiting for the toolchain image"]
    (toolchain,) = [s for s in engine.built if s.stage == "toolchain-stage"]
    tag = toolchain.load_tag
    assert tag is not None and state.toolchain_image == tag and state.toolchain_pending is None
    assert state.build_args["DOCKERARCH_TOOLCHAIN"] == tag
    log = state.log.getvalue()  # type: ignore[attr-defined]
    # the toolchain's lines joined the build's log after the runtime base's, not among them
    assert log.index("stage runtime-base-stage") < log.index("### buildx: stage toolchain-stage")
    assert "[toolchain-stage 2/4] RUN apt-get install" in log
    assert any(tag in line and "made in" in line for line in said), said


def test_the_runtime_base_is_made_once_per_packages_and_base_and_given_to_cold_builds(
    tmp_path: Path,
) -> None:
    """runtime-base (the base plus the artifacts' run-time packages: python3 and pip under QEMU
    were most of a small build's runtime image) is an image of the machine's, like the toolchain:
    made by the first build, taken by the next ones, --no-cache included, keyed by what it is
    made from."""
    engine = FakeEngine()
    state, said = job(tmp_path, engine, recipe="numpy")
    state.base_id = BASE
    buildsteps.toolchain_image(state)
    buildsteps.toolchain_ready(state)
    buildsteps.runtime_base_image(state)
    python, spec, _toolchain = sorted(engine.built, key=lambda s: s.stage)
    assert (spec.stage, spec.platform, spec.cache) == ("runtime-base-stage", "linux/arm/v7", False)
    tag = spec.load_tag
    assert tag is not None and tag.startswith("dockerarch/runtime-base:debian-armv7-")
    assert state.runtime_base_image == tag and state.build_args["DOCKERARCH_RUNTIME_BASE"] == tag
    # made with the native Python image, whose Python it byte-compiles with
    assert spec.build_args is not None
    assert spec.build_args["DOCKERARCH_NATIVE_PYTHON"] == python.load_tag
    assert any(tag in line and "made in" in line for line in said), said

    again, _ = job(tmp_path, engine, recipe="numpy")
    again.base_id = BASE
    buildsteps.toolchain_image(again)
    buildsteps.toolchain_ready(again)
    buildsteps.runtime_base_image(again)
    assert len(engine.built) == 3 and again.runtime_base_image == tag

    # Another toolchain (a recipe with other native drivers) of the same Python: the same image;
    # another native Python: another.
    dockerfile = (state.context / "Dockerfile").read_text()
    key = accel.runtime_base_key(dockerfile, state.context, BASE, BASE)
    assert tag.endswith(key[:16])
    drivers = dockerfile.replace("FROM native-python AS toolchain-stage\n",
                                 "FROM native-python AS toolchain-stage\nRUN true\n")  # fmt: skip
    assert accel.runtime_base_key(drivers, state.context, BASE, BASE) == key
    assert accel.toolchain_key(drivers, state.context, BASE) != accel.toolchain_key(
        dockerfile, state.context, BASE
    )
    python = dockerfile.replace("python3-pyelftools", "python3-pyelftools python3-venv")
    assert accel.runtime_base_key(python, state.context, BASE, BASE) != key
    assert accel.runtime_base_key(dockerfile, state.context, BASE, "sha256:" + "4" * 64) != key
    # opencv's artifacts need python3-numpy where numpy's need libopenblas0: another image
    other, _ = job(tmp_path, engine, recipe="opencv")
    other.base_id = BASE
    buildsteps.toolchain_image(other)
    buildsteps.toolchain_ready(other)
    buildsteps.runtime_base_image(other)
    assert other.runtime_base_image not in (None, tag)
    assert sum(s.stage == "runtime-base-stage" for s in engine.built) == 2
    # a re-bootstrapped base: another image of the same packages
    rebased, _ = job(tmp_path, engine, recipe="numpy")
    rebased.base_id = "sha256:" + "3" * 64
    buildsteps.toolchain_image(rebased)
    buildsteps.toolchain_ready(rebased)
    buildsteps.runtime_base_image(rebased)
    assert rebased.runtime_base_image not in (None, tag, other.runtime_base_image)
    # a changed apt script (the stage runs it): another image
    script = rebased.context / accel.CONTEXT_DIR / "apt-install"
    script.write_text(script.read_text() + "\n# changed\n")
    changed = rebased.runtime_base_image
    buildsteps.runtime_base_image(rebased)
    assert rebased.runtime_base_image not in (None, changed)


def test_a_runtime_base_is_built_in_place_with_nothing_to_install_on_a_node_or_registry_cache(
    tmp_path: Path,
) -> None:
    engine = FakeEngine()
    registry = "127.0.0.1:5000/dockerarch/buildcache:x"
    for recipe, node, cache in (("qpulib", False, None), ("numpy", True, None),
                                ("numpy", False, registry)):  # fmt: skip
        state, said = job(tmp_path, engine, recipe=recipe, node=node)
        state.base_id, state.cache_ref = BASE, cache
        buildsteps.runtime_base_image(state)
        assert state.runtime_base_image is None
        assert "DOCKERARCH_RUNTIME_BASE" not in state.build_args
        # with the registry's cache the steps stay keyed from the base every machine shares,
        # not from this machine's own image of it
        assert any("registry's cache" in line for line in said) == (cache is not None)
    assert engine.built == []
