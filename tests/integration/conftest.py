"""Integration tests drive the real engine, buildx, QEMU and registry that scripts/setup-host
started. They never skip: a machine that is not set up fails them, saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def dockerarch(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path = REPO, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI as a user would, in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "dockerarch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session", autouse=True)
def _host_is_set_up() -> None:
    answer = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if answer.returncode != 0:
        pytest.fail(
            "No Docker daemon answers: run scripts/setup-host (make test does) before the "
            f"integration tests.\n{answer.stderr}"
        )


CEXT = REPO / "tests" / "fixtures" / "cext"


@pytest.fixture(scope="session")
def cext_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C/C++ extension fixture built hybrid for armv7 and aarch64, once per run: its results
    (wheels, manifest.json) and runtime images serve every module that needs a real build."""
    done = dockerarch("base", "bootstrap", "--arch", "armv7,aarch64", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr
    out = tmp_path_factory.mktemp("cext")
    done = dockerarch("build", "wheel", "--package", str(CEXT), "--arch", "armv7,aarch64",
                      "--out", str(out), timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out
