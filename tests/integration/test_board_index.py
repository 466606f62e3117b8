"""A board that installs with pip: the demo's armv7 zstandard wheel uploaded to the package index
(the devpi-server scripts/setup-host runs), then an emulated armv7 board booted over NFS from the
exported runtime image pip-installs it from that index through its user-mode network, and gets
the very file that was verified.

The board lives in a network namespace of the test's own, where its user-mode network reaches
the namespace's loopback as 10.0.2.2. The index there is the same devpi-server program on a copy
of the index's state taken after the upload (the host's loopback is not the namespace's), so
nothing leaves the machine."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import board
from .conftest import dockerarch, in_netns

STATE = Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch"))
CHECK = """
python3 -m pip install -q --no-cache-dir --target /tmp/board-site --index-url {index} \\
    --trusted-host 10.0.2.2 \\
    --only-binary :all: --report /tmp/board-report.json zstandard==0.23.0 || exit 1
PYTHONPATH=/tmp/board-site python3 -B -c 'import zstandard as z, json; \\
    r = json.load(open("/tmp/board-report.json")); \\
    print("board installed", z.__file__.startswith("/tmp/board-site/"), \\
          r["install"][0]["download_info"]["archive_info"]["hashes"]["sha256"])'
"""


@pytest.fixture
def index_in_netns(netns: str, tmp_path: Path) -> Iterator[None]:
    """devpi-server on the namespace's 127.0.0.1:3141, on a copy of the local index's state."""
    server = tmp_path / "devpi-server"
    shutil.copytree(STATE / "index" / "server", server)
    venv = STATE / "index" / "venv" / "bin"
    log = (tmp_path / "devpi.log").open("w")
    proc = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{netns}", str(venv / "devpi-server"), "--serverdir",
         str(server), "--listen", "127.0.0.1:3141", "--offline-mode",
         "--secretfile", str(STATE / "index" / "secret")],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    probe = ["nsenter", f"--net=/run/netns/{netns}", str(venv / "python"), "-c",
             "import urllib.request; urllib.request.urlopen('http://127.0.0.1:3141/+api', timeout=2)"]  # fmt: skip
    try:
        for _ in range(120):
            if subprocess.run(probe, capture_output=True).returncode == 0:
                break
            assert proc.poll() is None, (tmp_path / "devpi.log").read_text()[-2000:]
            time.sleep(0.5)
        else:
            raise AssertionError("devpi-server did not answer in the namespace")
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_an_emulated_board_pip_installs_the_verified_wheel_from_the_index(
    demo_dist: tuple[Path, subprocess.CompletedProcess[str]],
    netns: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    out, _ = demo_dist
    run = f"b{uuid.uuid4().hex[:8]}"
    config = tmp_path / "registry.yaml"
    config.write_text(f"index:\n  url: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/\n"
                      f"  simple: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/+simple/\n")  # fmt: skip
    uploaded = dockerarch("upload", "wheel", "--package", "zstandard==0.23.0", "--arch", "armv7",
                          "--out", str(out), env={"DOCKERARCH_REGISTRY_CONFIG": str(config)})  # fmt: skip
    assert uploaded.returncode == 0, uploaded.stderr
    result = out / "debian-armv7" / "zstandard-0.23.0"
    data = json.loads((result / "manifest.json").read_text())
    (artifact,) = data["artifacts"]
    request.getfixturevalue("index_in_netns")  # the index as it is after the upload

    dest = tmp_path / "nfs" / "board-pip"
    dest.parent.mkdir()
    done = dockerarch("export-rootfs", "--image", data["image"]["tag"], "--target", "debian-armv7",
                      str(dest), "--server", "10.0.2.2", "--client", "10.0.2.0/24", timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    served = in_netns(netns, "nfs", "serve", str(dest), "--client", "127.0.0.1")
    assert served.returncode == 0, served.stderr
    try:
        kit = board.kit("armhf")
        index = f"http://10.0.2.2:3141/dockerarch/{run}-debian-armv7/+simple/"
        initrd = board.initramfs(kit, tmp_path / "initrd.gz",
                                 board_script=(dest / "board-chroot").read_bytes(),
                                 check=CHECK.format(index=index))  # fmt: skip
        code, console = board.boot("armhf", kit, initrd, nfspath=str(dest), netns=netns,
                                   timeout=600)  # fmt: skip
    finally:
        stopped = in_netns(netns, "nfs", "stop", str(dest))
    assert stopped.returncode == 0, stopped.stderr
    (tmp_path / "console.log").write_text(console)
    assert code == 0, console[-4000:]
    # (pip's warning colours may lead the line)
    said = re.search(r"board installed (\w+) ([0-9a-f]{64})$", console, re.M)
    assert said is not None, console[-3000:]
    assert said.groups() == ("True", artifact["sha256"])  # the very file that was verified
