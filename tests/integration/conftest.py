"""Integration tests drive the real engine, buildx, QEMU and registry that scripts/setup-host
started. They never skip: a machine that is not set up fails them, saying so."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
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


def free_gib_under_docker_root() -> float:
    root = subprocess.run(
        ["docker", "info", "--format", "{{.DockerRootDir}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return shutil.disk_usage(root).free / 2**30


def doctor_on_this_disk() -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]]]:
    """`dockerarch doctor --json`, asking for 4 GiB less disk than there is (how much is free is
    the machine's, and what the suite itself built, the other worker's builds among it, while
    doctor runs: the default 10 GiB is proved in test_doctor), and the rows that failed."""
    room = max(free_gib_under_docker_root() - 4, 0)
    done = dockerarch("doctor", "--json", "--min-free-gib", f"{room:.1f}")
    return done, [c for c in json.loads(done.stdout)["checks"] if not c["ok"]]


def dockerarch_each(
    commands: Sequence[Sequence[str]], *, timeout: float = 1800
) -> list[subprocess.CompletedProcess[str]]:
    """Several independent `dockerarch` commands, as dockerarch() runs one: the first alone (it
    makes the machine images the others share), then two at a time (a small package's build is
    mostly waiting on buildx, QEMU starts and exports: two side by side on 2 cores take about
    what one takes). In the order given."""
    if not commands:
        return []
    first = dockerarch(*commands[0], timeout=timeout)
    with ThreadPoolExecutor(max_workers=2) as pool:
        rest = list(pool.map(lambda args: dockerarch(*args, timeout=timeout), commands[1:]))
    return [first, *rest]


def _dangling_images() -> set[str]:
    listed = subprocess.run(
        ["docker", "images", "--quiet", "--no-trunc", "--filter", "dangling=true"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return set(listed.stdout.split()) if listed.returncode == 0 else set()


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's temporary root: under pytest-xdist, the directory every worker's is in."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[], dict[str, str]]
) -> dict[str, str]:
    """What ``make`` returns, made once in a run: the first worker to ask makes it, another that
    asks meanwhile waits for it (a file lock in the run's root), and later ones read it. A
    ``make`` that fails records nothing (the next to ask fails the same way, on its own)."""
    root = run_root(tmp_path_factory)
    record = root / f"{name}.json"
    with (root / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.exists():
            made: dict[str, str] = json.loads(record.read_text())
            return made
        made = make()
        record.write_text(json.dumps(made))
        return made


@pytest.fixture(scope="session", autouse=True)
def _host_is_set_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fails the run on a machine that is not set up; at its end, removes the images this run
    left untagged (every run retags its test images and rebuilds the farm's), so that runs on one
    machine do not fill its disk, and leaves every image that was there before alone. Under
    pytest-xdist the last worker to end does it, from what the first one to start found."""
    answer = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if answer.returncode != 0:
        pytest.fail(
            "No Docker daemon answers: run scripts/setup-host (make test does) before the "
            f"integration tests.\n{answer.stderr}"
        )
    root = run_root(tmp_path_factory)
    workers = root / "workers.json"  # {"running": N, "before": [image ids]}
    with (root / "workers.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(workers.read_text()) if workers.exists() else {"running": 0}
        if not state["running"]:
            state["before"] = sorted(_dangling_images())
        state["running"] += 1
        workers.write_text(json.dumps(state))
    yield
    with (root / "workers.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(workers.read_text())
        state["running"] -= 1
        workers.write_text(json.dumps(state))
        if state["running"]:
            return
        left = sorted(_dangling_images() - set(state["before"]))
        if left:  # an image still used by a container stays: rmi refuses it, and that is right
            subprocess.run(["docker", "rmi", *left], capture_output=True, timeout=600, check=False)


CEXT = REPO / "tests" / "fixtures" / "cext"


def bootstrapped_build(
    tmp_path_factory: pytest.TempPathFactory, folder: str, package: str, arch: str,
    timeout: float = 3600,
) -> tuple[Path, subprocess.CompletedProcess[str]]:  # fmt: skip
    """``package`` built for ``arch`` into a new temporary ``folder``, its bases bootstrapped
    first (cached when there): the results, and the build's command."""
    done = dockerarch("base", "bootstrap", "--arch", arch, "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr
    out = tmp_path_factory.mktemp(folder)
    done = dockerarch("build", "wheel", "--package", package, "--arch", arch, "--out", str(out),
                      timeout=timeout)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


@pytest.fixture(scope="session")
def cext_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C/C++ extension fixture built hybrid for armv7 and aarch64, once per run: its results
    (wheels, manifest.json) and runtime images serve every module that needs a real build."""

    def make() -> dict[str, str]:
        out, _ = bootstrapped_build(tmp_path_factory, "cext", str(CEXT), "armv7,aarch64")
        return {"out": str(out)}

    return Path(once_per_run(tmp_path_factory, "cext_dist", make)["out"])


@pytest.fixture(scope="session")
def demo_dist(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The demo's build (zstandard 0.23.0's sdist, hybrid, armv7 and aarch64), once per run."""

    def make() -> dict[str, str]:
        out, done = bootstrapped_build(tmp_path_factory, "dist", "zstandard==0.23.0",
                                       "armv7,aarch64", timeout=5400)  # fmt: skip
        return {"out": str(out), "stdout": done.stdout, "stderr": done.stderr}

    made = once_per_run(tmp_path_factory, "demo_dist", make)
    done = subprocess.CompletedProcess(["dockerarch", "build", "wheel"], 0, made["stdout"],
                                       made["stderr"])  # fmt: skip
    return Path(made["out"]), done


FIDELITY_LAYER = r"""
import os
os.makedirs("/fid/sgid"); os.chmod("/fid/sgid", 0o2775)
os.makedirs("/fid/sticky"); os.chmod("/fid/sticky", 0o1777)
open("/fid/suid", "w").write("suid"); os.chmod("/fid/suid", 0o4755)
open("/fid/owned", "w").write("4242"); os.chown("/fid/owned", 4242, 4242)
open("/fid/hard-a", "w").write("same inode"); os.link("/fid/hard-a", "/fid/hard-b")
os.mknod("/fid/null", 0o20666, os.makedev(1, 3))
os.mkfifo("/fid/fifo")
data = open("/bin/true", "rb").read()
open("/fid/pinger", "wb").write(data); os.chmod("/fid/pinger", 0o755)
os.setxattr("/fid/pinger", "security.capability", bytes.fromhex("0100000200200000000000000000000000000000"))
"""


def fidelity_image(base: str, platform: str, tag: str, context: Path) -> str:
    """``base`` (an image with python3) plus one layer holding every kind of entry a board's
    root has: setuid, setgid and sticky, uid 4242, a hardlink pair, a device node, a fifo and a
    file capability (cap_net_raw)."""
    (context / "make.py").write_text(FIDELITY_LAYER)
    (context / "Dockerfile").write_text(
        f"FROM {base}\nCOPY make.py /tmp/make.py\nRUN python3 /tmp/make.py && rm /tmp/make.py\n"
    )
    subprocess.run(["docker", "buildx", "build", "--platform", platform, "--load", "-t", tag,
                    str(context)], check=True, capture_output=True, timeout=900)  # fmt: skip
    return tag


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    """A network namespace of the test's own: a board's user-mode network and the servers it
    reaches (as 10.0.2.2) live there, and nothing leaves the machine."""
    name = f"dockerarch-board-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def in_netns(netns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nsenter", f"--net=/run/netns/{netns}", str(REPO / ".venv/bin/dockerarch"), *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
