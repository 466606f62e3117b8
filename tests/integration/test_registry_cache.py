"""The registry cache of registry.yaml, against the real local registry: a build whose local
build cache is gone reuses the steps an earlier build pushed there.

"Gone" is what that build made: its records are pruned from BuildKit's cache by id, nothing of
other builds (emptying the whole cache made every later module, and the next run's earlier
ones, build cold)."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from dockerarch import engine
from tests.integration.conftest import dockerarch

# it prunes what one build added to BuildKit's cache: what another test's build added meanwhile
# would be among it. make test runs these alone.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cext"
NAMESPACE = "dockerarch-test"


def _step_cached(log: str, needle: str) -> bool:
    """Whether buildx reported the step whose title contains ``needle`` as CACHED."""
    numbers = {
        m.group(1)
        for m in re.finditer(r"^#(\d+) \[build [^\]]+\] .*" + re.escape(needle), log, re.MULTILINE)
    }
    assert numbers, f"no step with {needle!r} in the log"
    return any(re.search(rf"^#{n} CACHED$", log, re.MULTILINE) for n in numbers)


def test_an_unreachable_cache_registry_does_not_fail_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text("registry:\n  address: 127.0.0.1:9\n  cache: true\n")  # discard port: refused
    monkeypatch.setenv("DOCKERARCH_REGISTRY_CONFIG", str(config))
    done = dockerarch("build", "wheel", "--package", str(FIXTURE), "--arch", "aarch64", "--no-smoke",
                      "--out", str(tmp_path / "out"), timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = [
        line
        for line in done.stderr.splitlines()
        if "registry cache" in line and "not pushed" in line
    ]
    assert len(said) == 1 and "127.0.0.1:9" in said[0] and "the build goes on without it" in said[0]
    assert list((tmp_path / "out" / "debian-aarch64" / "dockerarch_tinyext-1.0.0").glob("*.whl"))


def test_a_build_reuses_the_registry_cache_when_its_local_cache_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text(
        f"registry:\n  address: 127.0.0.1:5000\n  namespace: {NAMESPACE}\n  cache: true\n"
    )
    monkeypatch.setenv("DOCKERARCH_REGISTRY_CONFIG", str(config))
    # a source no build has compiled (earlier modules built the fixture: its compile step would
    # be in the local cache before the first build, and stay there)
    source = tmp_path / "cext"
    shutil.copytree(FIXTURE, source)
    with (source / "tinyext.c").open("a") as c:
        c.write(f"/* {secrets.token_hex(8)} */\n")
    args = ["build", "wheel", "--package", str(source), "--arch", "aarch64", "--no-smoke"]

    before = {r.id for r in engine.cache_records()}
    first = dockerarch(*args, "--out", str(tmp_path / "first"), timeout=3600)
    assert first.returncode == 0, first.stderr[-3000:]
    made = [r.id for r in engine.cache_records() if r.id not in before and r.kind == "regular"]
    assert made
    ref = f"127.0.0.1:5000/{NAMESPACE}/buildcache:debian-aarch64-dockerarch_tinyext-1.0.0-hybrid"
    assert f"registry cache pushed: {ref}" in first.stderr
    with urllib.request.urlopen(
        f"http://127.0.0.1:5000/v2/{NAMESPACE}/buildcache/tags/list", timeout=30
    ) as r:
        assert "debian-aarch64-dockerarch_tinyext-1.0.0-hybrid" in json.load(r)["tags"]

    # As on another machine: none of what the first build made in the local layer cache, no
    # local copy of the cache image.
    subprocess.run(["docker", "image", "rm", "--force", ref], capture_output=True, check=False)
    engine.prune_cache_records(made)
    assert not {r.id for r in engine.cache_records()} & set(made)
    second = dockerarch(*args, "--out", str(tmp_path / "second"), timeout=3600)
    assert second.returncode == 0, second.stderr[-3000:]
    log = (
        tmp_path / "second" / "debian-aarch64" / "dockerarch_tinyext-1.0.0" / "build.log"
    ).read_text()
    assert _step_cached(log, "uv build --wheel"), (
        "the compile step ran again instead of coming from the registry"
    )
    (a,) = (tmp_path / "first" / "debian-aarch64" / "dockerarch_tinyext-1.0.0").glob("*.whl")
    (b,) = (tmp_path / "second" / "debian-aarch64" / "dockerarch_tinyext-1.0.0").glob("*.whl")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()

    # Without the cache key, nothing is pushed.
    third = dockerarch(*args, "--no-registry-cache", "--out", str(tmp_path / "third"), timeout=3600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "registry cache" not in third.stderr
