"""This machine's toolchain images and runtime bases: each build's use recorded, those unused for
a while listed and removed by `dockerarch prune`, said by doctor; against a stand-in engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dockerarch import base, buildsteps, engine, machineimages
from dockerarch.errors import EngineError

from .cli import run
from .test_toolchain_image import FakeEngine, job

DAY = 86400.0
NOW = 1_800_000_000.0
TOOLCHAIN = "dockerarch/toolchain:arm-linux-gnueabihf-gcc12-aaaa"
OLD_TOOLCHAIN = "dockerarch/toolchain:arm-linux-gnueabihf-gcc12-bbbb"
RUNTIME = "dockerarch/runtime-base:debian-armv7-cccc"


class Engine:
    """The images there, each tagged 40 days ago; remove_image refuses ``busy``."""

    def __init__(self, busy: str | None = None) -> None:
        self.images = {TOOLCHAIN: 1_000_000_000, OLD_TOOLCHAIN: 1_100_000_000, RUNTIME: 200_000_000}
        self.busy = busy
        self.removed: list[str] = []

    def images_named(self, repositories: list[str]) -> list[engine.TaggedImage]:
        assert tuple(repositories) == machineimages.REPOSITORIES
        return [engine.TaggedImage(tag=t, id=f"sha256:{i}", size=s, tagged=NOW - 40 * DAY)
                for i, (t, s) in enumerate(self.images.items())]  # fmt: skip

    def remove_image(self, tag: str) -> None:
        if tag == self.busy:
            raise EngineError(f"{tag} was not removed: image is being used by container 1234")
        del self.images[tag]
        self.removed.append(tag)


@pytest.fixture
def images(monkeypatch: pytest.MonkeyPatch) -> Engine:
    stand_in = Engine()
    monkeypatch.setattr(engine, "images_named", stand_in.images_named)
    monkeypatch.setattr(engine, "remove_image", stand_in.remove_image)
    return stand_in


def test_a_builds_use_is_recorded_and_ages_the_rest(images: Engine) -> None:
    assert machineimages.record_use(TOOLCHAIN, now=NOW - 2 * DAY)
    assert machineimages.record_use(RUNTIME, now=NOW - 20 * DAY)
    listed = machineimages.listing()
    # least recently used first; one never recorded counts from when it was tagged
    assert [(m.tag, round(m.days_unused(NOW))) for m in listed] == [
        (OLD_TOOLCHAIN, 40), (RUNTIME, 20), (TOOLCHAIN, 2)]  # fmt: skip
    assert [m.kind for m in listed] == ["toolchain image", "runtime base", "toolchain image"]
    record = json.loads((base.STATE_DIR / machineimages.RECORD).read_text())
    assert record == {TOOLCHAIN: NOW - 2 * DAY, RUNTIME: NOW - 20 * DAY}


def test_prune_removes_what_no_build_used_for_the_days_given(images: Engine) -> None:
    machineimages.record_use(TOOLCHAIN, now=NOW - 2 * DAY)
    machineimages.record_use(RUNTIME, now=NOW - 20 * DAY)
    dry = machineimages.prune(14, dry_run=True, now=NOW)
    assert [m.tag for m in dry.removed] == [OLD_TOOLCHAIN, RUNTIME] and images.removed == []
    done = machineimages.prune(14, now=NOW)
    assert images.removed == [OLD_TOOLCHAIN, RUNTIME] and done.kept == []
    assert done.freed == 1_300_000_000
    # forgotten by the record; what stays is the image used two days ago
    record = json.loads((base.STATE_DIR / machineimages.RECORD).read_text())
    assert record == {TOOLCHAIN: NOW - 2 * DAY}
    assert machineimages.prune(14, now=NOW).removed == []
    assert [m.tag for m in machineimages.prune(1, now=NOW).removed] == [TOOLCHAIN]


def test_an_image_a_container_uses_is_kept_and_said(images: Engine) -> None:
    images.busy = RUNTIME
    done = machineimages.prune(14, now=NOW)
    assert [m.tag for m in done.removed] == [TOOLCHAIN, OLD_TOOLCHAIN]  # same age: by name
    ((kept, why),) = done.kept
    assert kept.tag == RUNTIME and "being used by container" in why


def test_a_state_directory_that_cannot_be_written_does_not_stop_a_build(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert machineimages.record_use(TOOLCHAIN, state=blocked / "state") is False


def test_a_build_that_takes_or_makes_a_machine_image_records_its_use(tmp_path: Path) -> None:
    fake = FakeEngine()
    state, _ = job(tmp_path, fake)
    buildsteps.toolchain_image(state)  # made
    buildsteps.toolchain_ready(state)
    record = base.STATE_DIR / machineimages.RECORD
    first = json.loads(record.read_text())
    python = state.build_args["DOCKERARCH_NATIVE_PYTHON"]
    assert sorted(first) == [python, state.toolchain_image]  # and its native Python image
    again, _ = job(tmp_path, fake)
    buildsteps.toolchain_image(again)  # taken: used again, later
    buildsteps.toolchain_ready(again)
    assert json.loads(record.read_text())[state.toolchain_image] >= first[state.toolchain_image]


def test_doctor_says_what_they_hold(images: Engine) -> None:
    machineimages.record_use(TOOLCHAIN, now=NOW)
    line = machineimages.summary(machineimages.listing(), 14, NOW)
    assert line == ("2 toolchain images, 1 runtime base: 2.3 GB; 2 unused for 14+ days (1.3 GB):"
                    " dockerarch prune removes them")  # fmt: skip
    assert machineimages.summary([], 14, NOW).startswith("none yet")


def test_prune_command(
    images: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(machineimages.time, "time", lambda: NOW)
    machineimages.record_use(TOOLCHAIN, now=NOW)
    code, out, _ = run(["prune", "--dry-run"], capsys)
    assert code == 0, out
    assert "WOULD REMOVE" in out and OLD_TOOLCHAIN in out and TOOLCHAIN + " " not in out
    assert "2 images, 1.3 GB (dry run: nothing removed)" in out and images.removed == []
    images.busy = RUNTIME
    code, out, err = run(["prune", "--json"], capsys)
    assert code == 1  # one was kept: said, and the exit code says so
    payload = json.loads(out)
    assert [r["tag"] for r in payload["removed"]] == [OLD_TOOLCHAIN]
    assert payload["kept"][0]["tag"] == RUNTIME and payload["freed"] == 1_100_000_000
    assert f"kept {RUNTIME}: " in err
    images.busy = None
    code, out, _ = run(["prune", "--unused-for", "100"], capsys)
    assert code == 0 and "Nothing to remove" in out
    code, out, err = run(["prune", "--unused-for", "-1"], capsys)
    assert code != 0 and "Traceback" not in out + err
