"""scripts/setup-host is idempotent and --stop stops what it started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .conftest import REPO, dockerarch

SETUP = str(REPO / "scripts" / "setup-host")
STATE = Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch"))


def setup_host(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SETUP, *args], capture_output=True, text=True, timeout=900, check=False)


def test_second_run_changes_nothing_and_says_so() -> None:
    done = setup_host()
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert steps and all(line.startswith("  already there") for line in steps), done.stdout
    assert done.stdout.rstrip().endswith("Nothing to do: this machine was already set up.")


def test_stop_then_start_again() -> None:
    pids = {name: (STATE / f"{name}.pid") for name in ("registry", "dockerd")}
    started_here = {name: p.exists() for name, p in pids.items()}
    stopped = setup_host("--stop")
    try:
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        for name, was in started_here.items():
            if was:
                assert f"stopped {name} (pid" in stopped.stdout
                assert not pids[name].exists()
        if started_here["registry"]:
            assert dockerarch("doctor").returncode == 1  # the registry is really gone
    finally:
        again = setup_host()
    assert again.returncode == 0, again.stdout + again.stderr
    if started_here["registry"]:
        assert "done           registry started at" in again.stdout
    assert dockerarch("doctor").returncode == 0


def test_unknown_option() -> None:
    done = setup_host("--bogus")
    assert done.returncode == 2
    assert "unknown option '--bogus'" in done.stderr
