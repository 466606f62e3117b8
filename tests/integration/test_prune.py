"""`dockerarch prune` against the real engine: the toolchain images and runtime bases no build
has used for the days given are removed, those used are not, one a container holds is kept and
said; doctor counts them. The record is the test's own state directory, and every machine image
already on the machine is recorded there as used just now, so only the test's own go."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import dockerarch

# prune removes the machine images its record does not hold: one another test makes meanwhile
# would be among them. make test runs these alone.
pytestmark = pytest.mark.serial
AMD64_BASE = "dockerarch/base/debian-amd64:bookworm"
STALE = f"dockerarch/toolchain:test-prune-gcc0-{os.getpid()}"  # a tag of the amd64 base's
BUSY = f"dockerarch/runtime-base:test-prune-busy-{os.getpid()}"  # an image of its own
DAY = 86400


def _docker(
    *args: str, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check,
                          input=stdin, timeout=600)  # fmt: skip


def _there(reference: str) -> bool:
    return _docker("image", "inspect", reference, check=False).returncode == 0


@pytest.fixture
def state(tmp_path: Path) -> Iterator[dict[str, str]]:
    done = dockerarch("base", "bootstrap", "--arch", "amd64", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr
    _docker("tag", AMD64_BASE, STALE)
    _docker("build", "-q", "-t", BUSY, "-", stdin=f"FROM {AMD64_BASE}\nRUN echo busy > /busy\n")
    container = _docker("create", BUSY, "true").stdout.strip()
    listed = _docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    now = time.time()
    used = {tag: now for tag in listed
            if tag.startswith(("dockerarch/toolchain:", "dockerarch/native-python:", "dockerarch/runtime-base:"))}  # fmt: skip
    used[STALE] = used[BUSY] = now - 30 * DAY
    (tmp_path / "machine-images.json").write_text(json.dumps(used))
    try:
        yield {"DOCKERARCH_STATE_DIR": str(tmp_path)}
    finally:
        _docker("rm", "--force", container, check=False)
        _docker("image", "rm", STALE, BUSY, check=False)


def test_prune_removes_only_what_no_build_used(state: dict[str, str]) -> None:
    doctor = dockerarch("doctor", "--json", env=state)
    (row,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "machine images"]
    assert "2 unused for 14+ days" in row["detail"] and "dockerarch prune" in row["detail"], row
    assert "pulled from 127.0.0.1:5000/dockerarch" in row["detail"], row  # the default: pull

    dry = dockerarch("prune", "--dry-run", "--json", env=state)
    assert dry.returncode == 0, dry.stderr
    assert sorted(r["tag"] for r in json.loads(dry.stdout)["removed"]) == sorted([STALE, BUSY])
    assert _there(STALE) and _there(BUSY)

    done = dockerarch("prune", env=state)
    assert done.returncode == 1, done.stdout + done.stderr  # the busy one was kept
    assert STALE in done.stdout and "up to" in done.stdout and "freed" in done.stdout
    assert f"kept {BUSY}: " in done.stderr and "container" in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not _there(STALE) and _there(BUSY) and _there(AMD64_BASE)  # only the tag went
    record = json.loads((Path(state["DOCKERARCH_STATE_DIR"]) / "machine-images.json").read_text())
    assert STALE not in record and BUSY in record
    # what builds used stays
    again = dockerarch("prune", "--json", env=state)
    assert [r["tag"] for r in json.loads(again.stdout)["removed"]] == []
