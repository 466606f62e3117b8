"""A hybrid build whose target base is missing bootstraps it in the background while the native
toolchain image is made from the amd64 base alone (buildsteps.ensure_base), and waits for it in
"base ready", before the first step that starts from it; against a stand-in engine and a
stand-in bootstrap (threads, no processes)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dockerarch import buildsteps
from dockerarch.base import LABEL_PREFIX
from dockerarch.errors import UsageError

from .test_toolchain_image import FakeEngine, job

_REAL_BOOTSTRAP_REQUEST = buildsteps.bases._bootstrap_request

TARGET_ID = "sha256:" + "7" * 64
REQUEST = object()  # stands in for the base.BaseRequest of a base dockerarch can make
EPOCH = "1783764997"


class Bootstraps:
    """Stands in for buildsteps._local_base: the amd64 base is there at once; the target's
    waits until ``release`` is set, then is ``made`` (or fails with ``error``)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.release = threading.Event()
        self.error = error
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, job: buildsteps.JobState, name: str, tag: str,
                 request: object = None) -> tuple[str, dict[str, str]]:  # fmt: skip
        with self.lock:
            self.asked.append(name)
        assert request in (None, REQUEST)  # the request ensure_base checked first
        if name == "debian-amd64":
            return "sha256:" + "1" * 64, {}
        assert self.release.wait(10), "the target's bootstrap was never let finish"
        if self.error is not None:
            raise self.error
        return TARGET_ID, {f"{LABEL_PREFIX}.source-date-epoch": EPOCH}


@pytest.fixture(autouse=True)
def _can_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buildsteps.bases, "_bootstrap_request", lambda name, tag: REQUEST)


def test_the_toolchain_image_is_made_while_the_target_base_is_bootstrapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstraps = Bootstraps()
    monkeypatch.setattr(buildsteps.bases, "_local_base", bootstraps)
    engine = FakeEngine()  # no base at all
    state, _ = job(tmp_path, engine)
    state.toolchain_base_id = None

    buildsteps.ensure_base(state)
    assert state.toolchain_base_id is not None and state.base_id is None
    buildsteps.toolchain_image(state)  # while debian-armv7's bootstrap has not finished
    buildsteps.toolchain_ready(state)
    # the native Python image and the toolchain image: made beside each other, before the
    # target's date is known
    assert sorted(spec.stage for spec in engine.built) == ["native-python-stage", "toolchain-stage"]
    for spec in engine.built:
        assert "SOURCE_DATE_EPOCH" not in (spec.build_args or {})  # the target's date: not yet
    assert state.base_pending is not None and not state.base_pending.done()

    waited: list[str] = []
    state.step = waited.append
    threading.Timer(0.2, bootstraps.release.set).start()
    buildsteps.base_ready(state)
    assert waited == ["waiting for the base dockerarch/base/debian-armv7:bookworm (bootstrapping)"]
    assert (state.base_id, state.source_date_epoch) == (TARGET_ID, int(EPOCH))
    assert state.base_pending is None
    assert sorted(bootstraps.asked) == ["debian-amd64", "debian-armv7"]


def test_a_failed_bootstrap_fails_the_build_at_base_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstraps = Bootstraps(UsageError("Target 'debian-armv7' has no base image yet"))
    monkeypatch.setattr(buildsteps.bases, "_local_base", bootstraps)
    state, _ = job(tmp_path, FakeEngine())
    buildsteps.ensure_base(state)
    bootstraps.release.set()
    with pytest.raises(UsageError, match="has no base image yet"):
        buildsteps.base_ready(state)
    assert state.base_id is None


@pytest.mark.parametrize("node", [False, True])
def test_a_base_that_is_there_or_a_nodes_build_takes_it_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: bool
) -> None:
    bootstraps = Bootstraps()
    bootstraps.release.set()
    monkeypatch.setattr(buildsteps.bases, "_local_base", bootstraps)
    tag = "dockerarch/base/debian-armv7:bookworm"
    engine = FakeEngine({tag} if not node else set())
    # a node's build copies the base there: the stand-in says the node has it already
    monkeypatch.setattr(engine, "image_labels", lambda ref, context=None: (TARGET_ID, {}))
    state, _ = job(tmp_path, engine, node=node)
    buildsteps.ensure_base(state)
    assert state.base_pending is None and state.base_id == TARGET_ID
    assert state.source_date_epoch == int(EPOCH)
    buildsteps.base_ready(state)  # nothing to wait for
    assert state.base_id == TARGET_ID


def test_a_base_dockerarch_cannot_make_is_said_before_anything_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dockerarch import base

    def no_mirror(target: object, **_kw: object) -> object:
        raise UsageError("no Debian mirror in the host's apt sources")

    monkeypatch.setattr(base, "make_request", no_mirror)
    monkeypatch.setattr(buildsteps.bases, "_bootstrap_request", _REAL_BOOTSTRAP_REQUEST)
    bootstraps = Bootstraps()
    monkeypatch.setattr(buildsteps.bases, "_local_base", bootstraps)
    engine = FakeEngine()
    state, _ = job(tmp_path, engine)
    with pytest.raises(UsageError, match="cannot bootstrap one unaided: no Debian mirror"):
        buildsteps.ensure_base(state)
    assert state.base_pending is None and bootstraps.asked == [] and engine.built == []


class _Request:
    """Stands in for a base.BaseRequest: what a pulled base is checked against."""

    class target:
        platform = "linux/arm/v7"

    def inputs_hash(self) -> str:
        return "9" * 64


def test_a_missing_base_is_pulled_from_the_team_s_registry_when_its_inputs_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dockerarch import base, machineimages
    from dockerarch.engine import Pulled

    from .test_toolchain_image import TEAM

    made: list[object] = []

    def bootstrap(request: object, progress: object = None) -> object:
        made.append(request)
        raise RuntimeError("bootstrapped")

    monkeypatch.setattr(base, "bootstrap", bootstrap)
    tag = "dockerarch/base/debian-armv7:bookworm"
    same = Pulled(labels={f"{LABEL_PREFIX}.inputs": "9" * 64}, platform="linux/arm/v7")
    engine = FakeEngine(registry={TEAM.remote(tag): same})
    engine.image_labels = lambda ref, context=None: (
        (TARGET_ID, same.labels) if ref in engine.images else None
    )  # type: ignore[method-assign]
    state, said = job(tmp_path, engine, sharing=TEAM)
    found = buildsteps.bases._local_base(state, "debian-armv7", tag, _Request())  # type: ignore[arg-type]
    assert found == (TARGET_ID, same.labels) and made == []
    assert any(f"base {tag} pulled from {TEAM.prefix}" in line for line in said), said
    # made from other inputs (another mirror, another suite): bootstrapped here
    other = Pulled(labels={f"{LABEL_PREFIX}.inputs": "8" * 64}, platform="linux/arm/v7")
    engine = FakeEngine(registry={TEAM.remote(tag): other})
    state, said = job(tmp_path, engine, sharing=TEAM)
    with pytest.raises(RuntimeError, match="bootstrapped"):
        buildsteps.bases._local_base(state, "debian-armv7", tag, _Request())  # type: ignore[arg-type]
    assert len(made) == 1 and TEAM.remote(tag) not in engine.images
    assert machineimages.same_platform(other.platform, _Request.target.platform)
