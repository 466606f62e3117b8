"""scripts/setup-host is idempotent and --stop stops what it started."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

from .conftest import REPO, dockerarch, doctor_on_this_disk

SETUP = str(REPO / "scripts" / "setup-host")
# setup-host --stop stops the daemons every other test uses: make test runs these alone.
pytestmark = pytest.mark.serial
STATE = Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch"))


def setup_host(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SETUP, *args], capture_output=True, text=True, timeout=900, check=False)


def test_second_run_changes_nothing_and_says_so() -> None:
    done = setup_host()
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert steps and all(line.startswith("  already there") for line in steps), done.stdout
    assert done.stdout.rstrip().endswith("Nothing to do: this machine was already set up.")


def cache_put(state: Path) -> int:
    """PUT a new small object into the compiler cache setup-host runs, with its credentials
    (a fresh key each time: nginx answers 201 for a new object, 204 for one replaced)."""
    import base64
    import urllib.error
    import urllib.request
    import uuid

    address = (state / "ccache" / "listen").read_text().strip().replace("0.0.0.0:", "127.0.0.1:")
    auth = base64.b64encode((state / "ccache" / "credentials").read_bytes().strip()).decode()
    request = urllib.request.Request(f"http://{address}/ccache/setup-host-test/{uuid.uuid4().hex}", data=b"x",
                                     method="PUT", headers={"Authorization": f"Basic {auth}"})  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_stop_then_start_again() -> None:
    pids = {name: (STATE / f"{name}.pid") for name in ("ccache", "index", "registry", "dockerd")}
    started_here = {name: p.exists() for name, p in pids.items()}
    stopped = setup_host("--stop")
    try:
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        for name, was in started_here.items():
            if was:
                assert f"stopped {name} (pid" in stopped.stdout
                assert not pids[name].exists()
            else:  # a daemon this script did not start (a system dockerd, say) is left alone
                assert f"{name} is not running from here" in stopped.stdout
        if started_here["registry"]:
            assert dockerarch("doctor").returncode == 1  # the registry is really gone
        answers = subprocess.run(["docker", "version"], capture_output=True, timeout=30).returncode
        assert (answers == 0) == (not started_here["dockerd"])
    finally:
        again = setup_host()
    assert again.returncode == 0, again.stdout + again.stderr
    if started_here["registry"]:
        assert "done           registry started at" in again.stdout
    if started_here["index"]:
        assert "done           package index started at" in again.stdout
    if started_here["dockerd"]:
        # the engine's build cache is bounded: the builder's garbage collector is on, at the limit
        limit = os.environ.get("DOCKERARCH_BUILD_CACHE_MAX_SIZE", "40G")
        assert f"build cache kept under {limit}" in again.stdout
        rules = subprocess.run(["docker", "buildx", "inspect"], capture_output=True, text=True,
                               timeout=60, check=True).stdout  # fmt: skip
        assert "GC Policy rule#0" in rules and "Keep Bytes" in rules, rules
        if limit == "40G":
            assert re.search(r"Keep Bytes:\s+40GiB", rules), rules
    if started_here["ccache"]:
        assert "done           compiler cache started at" in again.stdout
        assert (
            cache_put(STATE) == 201
        )  # restarted, it still takes objects (its temp dirs are its own)
    done, failing = doctor_on_this_disk()  # every row, the daemons' among them, passes again
    assert failing == [] and done.returncode == 0, failing


def test_unknown_option() -> None:
    done = setup_host("--bogus")
    assert done.returncode == 2
    assert "unknown option '--bogus'" in done.stderr


def test_registry_and_index_addresses_for_boards() -> None:
    """--registry-addr and --index-addr 0.0.0.0:PORT run the registry and the package index
    where boards reach them (every address of this machine); their own state directory keeps
    them apart from the main ones. The index runs as its own system user."""
    import socket

    from .registries import free_port

    port, index_port, cache_port = free_port(), free_port(), free_port()
    # pytest's own directory is closed to other users; the index runs as its own user
    state = Path(tempfile.mkdtemp(prefix="dockerarch-state-", dir="/var/tmp"))
    state.chmod(0o755)
    env = {**os.environ, "DOCKERARCH_STATE_DIR": str(state)}
    run = [SETUP, "--registry-addr", f"0.0.0.0:{port}", "--index-addr", f"0.0.0.0:{index_port}",
           "--cache-addr", f"0.0.0.0:{cache_port}"]  # fmt: skip
    done = subprocess.run(run, capture_output=True, text=True, timeout=900, env=env)
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"registry started at 0.0.0.0:{port}" in done.stdout
        assert f"package index started at 0.0.0.0:{index_port}" in done.stdout
        assert f"compiler cache started at 0.0.0.0:{cache_port}" in done.stdout
        listening = [line.split() for name in ("tcp", "tcp6")
                     for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]]  # fmt: skip
        local = {fields[1] for fields in listening if fields[3] == "0A"}  # LISTEN
        for p in (port, index_port, cache_port):
            # Bound to every address (0.0.0.0, or :: dual-stack), not only loopback.
            assert local & {f"00000000:{p:04X}", f"{'0' * 32}:{p:04X}"}, sorted(local)
            with socket.create_connection(("127.0.0.1", p), timeout=5):
                pass
        # The index's credentials are readable by root only.
        assert (state / "index" / "pypirc").stat().st_mode & 0o077 == 0
        assert (
            f"repository = http://127.0.0.1:{index_port}/"
            in (state / "index" / "pypirc").read_text()
        )
        # devpi-server runs as its own system user, who owns its state and cannot read them
        pid = int((state / "index.pid").read_text())
        assert Path(f"/proc/{pid}").stat().st_uid == pwd.getpwnam("dockerarch-index").pw_uid
        assert (state / "index" / "server").stat().st_uid == Path(f"/proc/{pid}").stat().st_uid
        for secret in ("pypirc", "root-password", "dockerarch-password"):
            assert (state / "index" / secret).stat().st_uid == 0
        # the compiler cache too: its own user, every request authenticated
        cache_pid = int((state / "ccache.pid").read_text())
        assert Path(f"/proc/{cache_pid}").stat().st_uid == pwd.getpwnam("dockerarch-cache").pw_uid
        assert (state / "ccache" / "credentials").stat().st_mode & 0o077 == 0
        with socket.create_connection(("127.0.0.1", cache_port), timeout=5) as raw:
            raw.sendall(b"GET /ccache/x HTTP/1.0\r\nHost: x\r\n\r\n")
            assert raw.recv(64).split()[1] == b"401"
        # its size limit: objects written (oldest first), then the limit lowered: setup-host
        # restarts the size keeper, whose first sweep removes the least recently used to 90%
        auth = base64.b64encode((state / "ccache" / "credentials").read_bytes().strip()).decode()
        names = [f"0000000000000000/object-{i}" for i in range(8)]
        for age, name in enumerate(reversed(names)):  # object-0 the newest, object-7 the oldest
            put = urllib.request.Request(f"http://127.0.0.1:{cache_port}/ccache/{name}", data=b"x" * 10240,
                                         method="PUT", headers={"Authorization": f"Basic {auth}"})  # fmt: skip
            assert (
                urllib.request.build_opener(urllib.request.ProxyHandler({})).open(put).status == 201
            )
            stored = state / "ccache" / "store" / "ccache" / name
            os.utime(stored, (1_700_000_000 + age, 1_700_000_000 + age))
        again = subprocess.run([*run, "--cache-max-size", "40K"], capture_output=True, text=True,
                               timeout=300, env=env)  # fmt: skip
        assert "compiler cache size limit 40K (least recently used out first" in again.stdout
        status = json.loads((state / "ccache" / "logs" / "sweep.json").read_text())
        kept = sorted(
            p.name for p in (state / "ccache" / "store" / "ccache" / "0000000000000000").iterdir()
        )
        assert kept == ["object-0", "object-1", "object-2"], (kept, status)  # 30 KiB <= 90% of 40
        assert status["evicted"] == 5 and status["limit"] == 40 * 1024
        installed = (state / "index" / "venv" / ".dockerarch-requirements").read_text().strip()
        assert (
            installed
            == hashlib.sha256((REPO / "scripts/index-requirements.txt").read_bytes()).hexdigest()
        )
    finally:
        stopped = subprocess.run([SETUP, "--stop"], capture_output=True, text=True, env=env)
        shutil.rmtree(state, ignore_errors=True)
    assert "stopped index (pid" in stopped.stdout
    assert "stopped ccache (pid" in stopped.stdout
    assert "stopped ccache-sweep (pid" in stopped.stdout
    assert "stopped registry (pid" in stopped.stdout
    assert "dockerd is not running from here" in stopped.stdout  # the main engine is untouched


def test_bad_build_cache_size() -> None:
    done = setup_host("--build-cache-max-size", "lots")
    assert done.returncode == 2
    assert "the build cache size 'lots' is not a size (like 40G" in done.stderr


def test_bad_index_address() -> None:
    done = setup_host("--index-addr", "0.0.0.0:99999")
    assert done.returncode == 2
    assert "package index address '0.0.0.0:99999' is not HOST:PORT" in done.stderr


def test_bad_registry_address() -> None:
    done = setup_host("--registry-addr", "no port")
    assert done.returncode == 2
    assert "is not HOST:PORT" in done.stderr
